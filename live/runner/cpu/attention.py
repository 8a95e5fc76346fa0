"""Decode attention on the CPU as one compiled kernel (`attention.cpp`) that
reads K and V straight from the paged cache through the block tables: each context
is read once, in order, and copied nowhere (the reference `paged_decode_attention`
gathers every context's blocks first). Built for the model's heads and head size
the first time a runner asks for it (`build`)."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from ..kv_cache import BlockTables
from .build import load_kernel

SOURCE = Path(__file__).with_name("attention.cpp")
DTYPES = (torch.float32, torch.bfloat16)
"""The cache dtypes the kernel reads."""

_ARGS = ([ctypes.c_void_p] * 4 + [ctypes.c_int64] + [ctypes.c_void_p] * 2
         + [ctypes.c_int64] * 2 + [ctypes.c_float, ctypes.c_int])


class CpuDecodeAttention:
    """The decode attention the runner uses on the CPU (see
    `attention.decode_attention_for`)."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int):
        if heads % kv_heads:
            raise ValueError(f"{heads} query heads do not group over {kv_heads} KV heads")
        library = load_kernel(SOURCE, {"KV_HEADS": kv_heads, "GROUP": heads // kv_heads,
                                       "HEAD_DIM": head_dim})
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self._kernels = {}
        for dtype in DTYPES:
            kernel = getattr(library, f"paged_decode_{str(dtype).removeprefix('torch.')}")
            kernel.argtypes, kernel.restype = _ARGS, None
            self._kernels[dtype] = kernel

    attends_prompts = True

    def context(self, block_tables: list[list[int]], context_lens: list[int],
                rows: list[int] | None = None) -> BlockTables:
        return BlockTables.build(block_tables, context_lens, "cpu", rows)

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 context: BlockTables, scale: float) -> torch.Tensor:
        """q `[sequences, heads, head_dim]` (row i is sequence i), caches
        `[num_blocks, block_size, kv_heads, head_dim]`, every context at least one
        token. Returns `[sequences, heads, head_dim]` in q's dtype."""
        seqs, heads, dim = q.shape
        _, block_size, kv_heads, cache_dim = k_cache.shape
        if (heads, kv_heads, dim, cache_dim) != (self.heads, self.kv_heads, self.head_dim,
                                                 self.head_dim) or v_cache.shape != k_cache.shape:
            raise ValueError(f"q {tuple(q.shape)} and caches {tuple(k_cache.shape)}, "
                             f"{tuple(v_cache.shape)}: the kernel is built for {self.heads} "
                             f"heads over {self.kv_heads} of {self.head_dim}")
        if context.tables.shape[0] != seqs or context.lens.shape != (seqs,):
            raise ValueError(f"{seqs} queries, block tables {tuple(context.tables.shape)}, "
                             f"lengths {tuple(context.lens.shape)}")
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()) \
                or not k_cache.dtype == v_cache.dtype == q.dtype:
            raise ValueError("the caches must be contiguous and of q's dtype")
        q = q.contiguous()
        out = torch.empty_like(q)
        self._kernels[q.dtype](q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                               context.tables.data_ptr(), context.tables.shape[1],
                               context.lens.data_ptr(), out.data_ptr(), seqs, block_size, scale,
                               torch.get_num_threads())
        return out
