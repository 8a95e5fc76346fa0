"""Attention for prefill (causal, over a prompt's fresh K/V) and for decode (one
query per sequence, reading its context from the paged cache through its block
table). `paged_decode_attention` is the seam where a GPU kernel plugs in: it takes
the cache, the block tables and the context lengths, nothing padded.

Shapes: q `[tokens, heads, head_dim]`, k and v `[tokens, kv_heads, head_dim]`;
grouped-query attention when kv_heads < heads."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PromptSpans:
    """Where each prompt sits in a packed prefill batch."""

    starts: list[int]
    lengths: list[int]


@dataclass(frozen=True)
class PagedContext:
    """Where each decoding sequence's context lives: the block ids of all sequences
    concatenated (`block_ids[offsets[i]:offsets[i + 1]]` is sequence i's table),
    and how many tokens each context holds."""

    block_ids: torch.Tensor
    offsets: list[int]
    context_lens: list[int]
    block_size: int

    @classmethod
    def build(cls, block_tables: list[list[int]], context_lens: list[int], block_size: int,
              device: torch.device | str) -> PagedContext:
        tables = [table[:-(-n // block_size)] for table, n in zip(block_tables, context_lens)]
        offsets = [0]
        for table in tables:
            offsets.append(offsets[-1] + len(table))
        ids = torch.tensor([b for table in tables for b in table], dtype=torch.long, device=device)
        return cls(ids, offsets, list(context_lens), block_size)


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      spans: PromptSpans, scale: float) -> torch.Tensor:
    """Causal attention of each prompt over itself."""
    out = torch.empty_like(q)
    for start, length in zip(spans.starts, spans.lengths):
        rows = slice(start, start + length)
        out[rows] = _sdpa(q[rows], k[rows], v[rows], scale, causal=True)
    return out


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           context: PagedContext, scale: float) -> torch.Tensor:
    """One query per sequence (q row i is sequence i) over its whole context, read
    from `k_cache`/`v_cache` (`[num_blocks, block_size, kv_heads, head_dim]`).

    On CPU, gathering one sequence's blocks and attending at once measured fastest:
    a segment softmax over a ragged concatenation of all contexts (scatter and
    index_add are slow), one big gather (it falls out of cache), an online softmax
    over chunks of blocks of all sequences (small batched matmuls) and nested-tensor
    SDPA were all 1.5 to 10 times slower."""
    heads, dim = k_cache.shape[2], k_cache.shape[3]
    out = torch.empty_like(q)
    for i, length in enumerate(context.context_lens):
        blocks = context.block_ids[context.offsets[i]:context.offsets[i + 1]]
        k = k_cache.index_select(0, blocks).view(-1, heads, dim)[:length]
        v = v_cache.index_select(0, blocks).view(-1, heads, dim)[:length]
        out[i] = _sdpa(q[i:i + 1], k, v, scale, causal=False)[0]
    return out


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
          causal: bool) -> torch.Tensor:
    """`[tokens, heads, dim]` in and out; SDPA wants heads before tokens."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0), is_causal=causal, scale=scale,
        enable_gqa=k.shape[1] != q.shape[1])
    return out[0].transpose(0, 1)
