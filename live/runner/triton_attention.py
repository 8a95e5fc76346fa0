"""Decode attention as one Triton kernel that reads K and V straight from the paged
cache through each sequence's block table: nothing is gathered into per-sequence
copies and nothing depends on the batch's shape but the launch grid, so a CUDA
graph can capture it with its inputs in fixed buffers.

One program per (sequence, KV head) walks the sequence's context a tile of tokens
at a time (a tile spans several blocks, each token's block looked up in the table)
and keeps an online softmax for the query heads that share that KV head
(grouped-query attention), so each block is read once per KV head. Scores, softmax
and the weighted sum are float32 products whatever the cache dtype (`tl.dot` in
"ieee" precision, not the matrix units' tf32 or bf16): exactly what the tests check
in Triton's interpreter, whose bf16 dot is wrong, is what runs on the GPU."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .kv_cache import BlockTables


@dataclass(frozen=True)
class TritonDecodeAttention:
    """The decode attention the runner uses where Triton runs (see
    `attention.decode_attention_for`)."""

    device: torch.device
    attends_prompts = False  # a program a row would read a prompt's K and V once per token

    def context(self, block_tables: list[list[int]], context_lens: list[int]) -> BlockTables:
        return BlockTables.build(block_tables, context_lens, self.device)

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 context: BlockTables, scale: float) -> torch.Tensor:
        return triton_decode_attention(q, k_cache, v_cache, context, scale)


TILE_TOKENS = 64
"""Context tokens one step of the kernel's loop reads (from as many blocks as they
span): one block a step would leave each program a long chain of small, dependent
loads, which is the latency of a decode step at small batches."""
NUM_WARPS = 8
"""With a 64-token tile, what the kernel's working set needs to stay in registers
(four warps spill it; tests/test_triton_compile.py checks)."""
MIN_DOT = 16
"""The least extent of each side of a `tl.dot`."""


def triton_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            context: BlockTables, scale: float, tile: int = TILE_TOKENS,
                            num_warps: int = NUM_WARPS) -> torch.Tensor:
    """q `[sequences, heads, head_dim]` (row i is sequence i), caches
    `[num_blocks, block_size, kv_heads, head_dim]`; every context holds at least
    one token. Returns `[sequences, heads, head_dim]` in q's dtype. `tile` and
    `num_warps` are the kernel's tuning (benchmarks/bench_attention.py)."""
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
    _paged_decode_kernel[(seqs, kv_heads)](
        q, k_cache, v_cache, out, context.tables, context.lens, scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), context.tables.stride(0),
        **kernel_constants(heads // kv_heads, dim, block_size, tile), num_warps=num_warps)
    return out


def kernel_constants(group: int, head_dim: int, block_size: int,
                     tile: int = TILE_TOKENS) -> dict[str, int]:
    """The kernel's compile-time shape for query heads per KV head, head size and
    block size: one build per model and block size."""
    return {"GROUP": group, "ROWS": max(MIN_DOT, triton.next_power_of_2(group)),
            "HEAD_DIM": head_dim, "DIM_PAD": max(MIN_DOT, triton.next_power_of_2(head_dim)),
            "BLOCK_SIZE": block_size, "TILE": tile}


@triton.jit
def _paged_decode_kernel(q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, lens_ptr, scale,
                         q_seq_stride, q_head_stride, out_seq_stride, out_head_stride,
                         block_stride, slot_stride, kv_head_stride, table_stride,
                         GROUP: tl.constexpr, ROWS: tl.constexpr,
                         HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr,
                         BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    rows = tl.arange(0, ROWS)  # the group's query heads, padded to a dot's least height
    dims = tl.arange(0, DIM_PAD)
    tokens = tl.arange(0, TILE)
    row_ok = rows < GROUP
    dim_ok = dims < HEAD_DIM
    heads = kv_head * GROUP + rows
    q_mask = row_ok[:, None] & dim_ok[None, :]
    q_rows = q_ptr + seq * q_seq_stride + heads[:, None] * q_head_stride + dims[None, :]
    q = tl.load(q_rows, mask=q_mask, other=0.0).to(tl.float32)                 # [rows, dim]

    length = tl.load(lens_ptr + seq)
    table = tables_ptr + seq * table_stride
    row_max = tl.full([ROWS], float("-inf"), tl.float32)
    row_sum = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, DIM_PAD], tl.float32)
    for start in range(0, length, TILE):
        positions = start + tokens
        token_ok = positions < length
        block = tl.load(table + positions // BLOCK_SIZE, mask=token_ok, other=0).to(tl.int64)
        kv_offsets = (block[:, None] * block_stride + (positions % BLOCK_SIZE)[:, None] * slot_stride
                      + kv_head * kv_head_stride + dims[None, :])
        kv_mask = token_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)  # [tile, dim]
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale           # [rows, tile]
        scores = tl.where(token_ok[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        probs = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(row_max - new_max)  # 0 on the first tile, where row_max is -inf
        v = tl.load(v_ptr + kv_offsets, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * rescale[:, None] + tl.dot(probs, v, input_precision="ieee")
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        row_max = new_max
    out_rows = out_ptr + seq * out_seq_stride + heads[:, None] * out_head_stride + dims[None, :]
    tl.store(out_rows, (acc / row_sum[:, None]).to(out_ptr.dtype.element_ty), mask=q_mask)
