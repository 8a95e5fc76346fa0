"""Random paged caches for the decode attention kernels, and the reference answer:
block tables out of order and longer than the context (as reservation makes them),
contexts ending inside, on and past block boundaries."""
from __future__ import annotations

import torch

from live.runner.attention import PagedContext, paged_decode_attention

LENGTHS = [1, 4, 5, 16, 17, 40, 64, 65, 150]
"""Contexts ending inside, on and past blocks, and on and past the kernels' tiles."""


def random_case(heads, kv_heads, dim, block_size, dtype, device="cpu", lengths=LENGTHS, seed=0):
    """Caches, per-sequence tables with a spare block or two past the context, and queries."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-n // block_size) + i % 3 for i, n in enumerate(lengths)]
    num_blocks = sum(need) + 3
    k_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=g)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=g)
    order = torch.randperm(num_blocks, generator=g).tolist()
    tables = [[order.pop() for _ in range(n)] for n in need]
    q = torch.randn(len(lengths), heads, dim, generator=g)
    return (q.to(device, dtype), k_cache.to(device, dtype), v_cache.to(device, dtype), tables)


def reference(q, k_cache, v_cache, tables, lengths, block_size, scale):
    """The CPU reference path in float32 on the same (possibly bf16-rounded) values."""
    context = PagedContext.build(tables, lengths, block_size, "cpu")
    return paged_decode_attention(q.float().cpu(), k_cache.float().cpu(), v_cache.float().cpu(),
                                  context, scale)


def strided_case(device="cpu"):
    """GPT-2 splits q out of a fused projection: rows 3x wider than the heads. Queries
    so strided (4 heads of 16), caches of blocks of 4 tokens, tables, and the answer
    at scale 0.25."""
    heads, dim, block_size = 4, 16, 4
    q, k_cache, v_cache, tables = random_case(heads, heads, dim, block_size, torch.float32,
                                              device, seed=2)
    fused = torch.cat([q.view(len(LENGTHS), -1)] * 3, dim=1)
    strided = fused[:, :heads * dim].view(len(LENGTHS), heads, dim)
    assert not strided.is_contiguous()
    return strided, k_cache, v_cache, tables, reference(q, k_cache, v_cache, tables, LENGTHS,
                                                        block_size, 0.25)
