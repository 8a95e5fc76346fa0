"""Attention for decode: one query per sequence, reading its context from the
paged cache through its block table (prefill's is in `prefill_attention`).
`decode_attention_for` is the one place the decode attention is chosen:
`paged_decode_attention` here, the reference, or a kernel that reads the cache in
place: on CUDA the Triton kernel of `triton_attention`, on the CPU the compiled one
of `cpu.attention`. All take the cache, the block tables and the context lengths.

Shapes: q `[sequences, heads, head_dim]`, caches `[num_blocks, block_size, kv_heads,
head_dim]`; grouped-query attention when kv_heads < heads."""
from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Protocol

import torch

from .kv_cache import KVLayout

log = logging.getLogger("twinstep.runner")


@dataclass(frozen=True)
class PagedContext:
    """Where the decoding sequences' contexts live, at block granularity: the block
    ids of all sequences concatenated (ragged, nothing padded), which sequence owns
    each, its place in a `[sequences, widest]` grid of blocks, and a mask of the
    slots past each context's end."""

    block_ids: torch.Tensor
    owner: torch.Tensor
    grid_index: torch.Tensor
    mask: torch.Tensor
    widest: int

    @classmethod
    def build(cls, block_tables: list[list[int]], context_lens: list[int], block_size: int,
              device: torch.device | str) -> PagedContext:
        counts = [-(-n // block_size) for n in context_lens]
        widest = max(counts)
        ids, owner, grid, first_pos = [], [], [], []
        for i, (table, count) in enumerate(zip(block_tables, counts)):
            ids.extend(table[:count])
            owner.extend([i] * count)
            grid.extend(range(i * widest, i * widest + count))
            first_pos.extend(range(0, count * block_size, block_size))
        owner_t = torch.tensor(owner, dtype=torch.long, device=device)
        slot_pos = (torch.tensor(first_pos, device=device)[:, None]
                    + torch.arange(block_size, device=device))
        lens = torch.tensor(context_lens, device=device).index_select(0, owner_t)
        mask = torch.where(slot_pos < lens[:, None], 0.0, float("-inf"))
        return cls(torch.tensor(ids, dtype=torch.long, device=device), owner_t,
                   torch.tensor(grid, dtype=torch.long, device=device), mask, widest)


class DecodeAttention(Protocol):
    """How decoding sequences attend to their paged contexts: `context` turns the
    step's block tables and context lengths into the form the attention reads.
    One that `attends_prompts` reads any number of rows a sequence, so a prefill's
    rows take it too, `rows` saying how many each sequence has."""

    attends_prompts: bool

    def context(self, block_tables: list[list[int]], context_lens: list[int],
                rows: list[int] | None = None): ...

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, context,
                 scale: float) -> torch.Tensor: ...


@dataclass(frozen=True)
class ReferenceDecodeAttention:
    block_size: int
    device: torch.device
    attends_prompts = False

    def context(self, block_tables: list[list[int]], context_lens: list[int]) -> PagedContext:
        return PagedContext.build(block_tables, context_lens, self.block_size, self.device)

    def __call__(self, q, k_cache, v_cache, context: PagedContext, scale: float) -> torch.Tensor:
        return paged_decode_attention(q, k_cache, v_cache, context, scale)


def decode_attention_for(device: torch.device, dtype: torch.dtype, block_size: int, heads: int,
                         layout: KVLayout) -> DecodeAttention:
    """The Triton kernel on CUDA when triton is installed; on the CPU the compiled
    kernel for float32 and bfloat16 when it builds; else the reference."""
    if device.type == "cuda" and importlib.util.find_spec("triton") is not None:
        from .triton_attention import TritonDecodeAttention
        return TritonDecodeAttention(device)
    if device.type == "cpu":
        from .cpu.attention import DTYPES, CpuDecodeAttention
        from .cpu.build import NativeBuildError
        if dtype in DTYPES:
            try:
                return CpuDecodeAttention(heads, layout.kv_heads, layout.head_dim)
            except NativeBuildError as exc:
                log.warning("the CPU decode attention kernel is not available, decode takes "
                            "the slower reference path: %s", exc)
    return ReferenceDecodeAttention(block_size, device)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           context: PagedContext, scale: float) -> torch.Tensor:
    """One query per sequence (q row i is sequence i) over its whole context, read
    from `k_cache`/`v_cache` (`[num_blocks, block_size, kv_heads, head_dim]`).

    Scores are computed block by block for all sequences in one batched matmul over
    the ragged list of their blocks; only the scores (a few numbers per slot) are
    laid out on a `[sequences, widest]` grid for the softmax. A handful of large
    ops rather than one small attention per sequence: on a CPU shared with the
    server's other threads, many small ops each pay a thread-pool handoff."""
    seqs, heads, dim = q.shape
    kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    group = heads // kv_heads
    # Both gathered straight into [blocks, kv, slot, dim]: contiguous, so that the
    # matmuls below copy nothing (a permuted view would make them copy it again;
    # a transpose of the last two dims they take as it is).
    k = k_cache.transpose(1, 2).index_select(0, context.block_ids)
    v = v_cache.transpose(1, 2).index_select(0, context.block_ids)
    qb = q.index_select(0, context.owner).view(-1, kv_heads, group, dim)
    scores = torch.matmul(qb, k.transpose(-1, -2)).mul_(scale).add_(context.mask[:, None, None, :])
    grid = scores.new_full((seqs * context.widest, kv_heads, group, block_size), float("-inf"))
    grid[context.grid_index] = scores
    grid = grid.view(seqs, context.widest, kv_heads, group, block_size).permute(0, 2, 3, 1, 4)
    probs = torch.softmax(grid.reshape(seqs, kv_heads, group, -1), dim=-1)
    probs = (probs.view(seqs, kv_heads, group, context.widest, block_size).permute(0, 3, 1, 2, 4)
             .reshape(seqs * context.widest, kv_heads, group, block_size)[context.grid_index])
    out = q.new_zeros(seqs, kv_heads, group, dim)
    out.index_add_(0, context.owner, torch.matmul(probs, v))
    return out.view(seqs, heads, dim)

