"""Decode attention as one Triton kernel that reads K and V straight from the paged
cache through each sequence's block table: nothing is gathered into per-sequence
copies and nothing depends on the batch's shape but the launch grid, so a CUDA
graph can capture it with its inputs in fixed buffers.

One program per (sequence, KV head) walks the sequence's blocks in order and keeps
an online softmax for the query heads that share that KV head (grouped-query
attention), so each block is read once per KV head. Scores, softmax and the
weighted sum are in float32 whatever the cache dtype."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class BlockTables:
    """The decoding sequences' block tables as one `[sequences, width]` int32 grid
    (rows padded with block 0, never read past a context's end) and their context
    lengths in tokens."""

    tables: torch.Tensor
    lens: torch.Tensor

    @classmethod
    def build(cls, block_tables: list[list[int]], context_lens: list[int],
              device: torch.device | str) -> BlockTables:
        width = max(len(t) for t in block_tables)
        rows = [list(t) + [0] * (width - len(t)) for t in block_tables]
        return cls(torch.tensor(rows, dtype=torch.int32, device=device),
                   torch.tensor(context_lens, dtype=torch.int32, device=device))


@dataclass(frozen=True)
class TritonDecodeAttention:
    """The decode attention the runner uses where Triton runs (see
    `attention.decode_attention_for`)."""

    device: torch.device

    def context(self, block_tables: list[list[int]], context_lens: list[int]) -> BlockTables:
        return BlockTables.build(block_tables, context_lens, self.device)

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 context: BlockTables, scale: float) -> torch.Tensor:
        return triton_decode_attention(q, k_cache, v_cache, context, scale)


def triton_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            context: BlockTables, scale: float) -> torch.Tensor:
    """q `[sequences, heads, head_dim]` (row i is sequence i), caches
    `[num_blocks, block_size, kv_heads, head_dim]`; every context holds at least
    one token. Returns `[sequences, heads, head_dim]` in q's dtype."""
    seqs, heads, dim = q.shape
    _, block_size, kv_heads, cache_dim = k_cache.shape
    if cache_dim != dim or v_cache.shape != k_cache.shape or heads % kv_heads:
        raise ValueError(f"q {tuple(q.shape)} does not fit caches {tuple(k_cache.shape)} "
                         f"and {tuple(v_cache.shape)}")
    if context.tables.shape[0] != seqs or context.lens.shape != (seqs,):
        raise ValueError(f"{seqs} queries, block tables {tuple(context.tables.shape)}, "
                         f"lengths {tuple(context.lens.shape)}")
    if k_cache.stride(-1) != 1 or v_cache.stride() != k_cache.stride() or q.stride(-1) != 1:
        raise ValueError("q and the caches must be contiguous along head_dim, and the "
                         "caches laid out alike")
    out = torch.empty_like(q)
    group = heads // kv_heads
    _paged_decode_kernel[(seqs, kv_heads)](
        q, k_cache, v_cache, out, context.tables, context.lens, scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), context.tables.stride(0),
        GROUP=group, GROUP_PAD=triton.next_power_of_2(group),
        HEAD_DIM=dim, DIM_PAD=triton.next_power_of_2(dim),
        BLOCK_SIZE=block_size, SLOTS_PAD=triton.next_power_of_2(block_size))
    return out


@triton.jit
def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, lens_ptr, scale,
                         q_seq_stride, q_head_stride, out_seq_stride, out_head_stride,
                         block_stride, slot_stride, kv_head_stride, table_stride,
                         GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                         HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
                         BLOCK_SIZE: tl.constexpr, SLOTS_PAD: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    group = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, DIM_PAD)
    slots = tl.arange(0, SLOTS_PAD)
    head_ok = group < GROUP
    dim_ok = dims < HEAD_DIM
    heads = kv_head * GROUP + group
    q_mask = head_ok[:, None] & dim_ok[None, :]
    q_rows = q_ptr + seq * q_seq_stride + heads[:, None] * q_head_stride + dims[None, :]
    q = tl.load(q_rows, mask=q_mask, other=0.0).to(tl.float32) * scale     # [group, dim]

    length = tl.load(lens_ptr + seq)
    row_max = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    row_sum = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM_PAD], tl.float32)
    for b in range(0, tl.cdiv(length, BLOCK_SIZE)):
        block = tl.load(tables_ptr + seq * table_stride + b).to(tl.int64)
        slot_ok = (slots < BLOCK_SIZE) & (b * BLOCK_SIZE + slots < length)
        kv_offsets = (block * block_stride + slots[:, None] * slot_stride
                      + kv_head * kv_head_stride + dims[None, :])
        kv_mask = slot_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)  # [slot, dim]
        scores = tl.sum(q[:, None, :] * k[None, :, :], axis=2)                   # [group, slot]
        scores = tl.where(slot_ok[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        probs = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(row_max - new_max)  # 0 on the first block, where row_max is -inf
        v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * rescale[:, None] + tl.sum(probs[:, :, None] * v[None, :, :], axis=1)
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        row_max = new_max
    out_rows = out_ptr + seq * out_seq_stride + heads[:, None] * out_head_stride + dims[None, :]
    tl.store(out_rows, (acc / row_sum[:, None]).to(out_ptr.dtype.element_ty), mask=q_mask)
