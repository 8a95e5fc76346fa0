"""Storing a step's K and V in the paged cache on the CPU as a compiled kernel
(`kv_write.cpp`): a copy a row into its slot."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .build import load_kernel

SOURCE = Path(__file__).with_name("kv_write.cpp")

_P, _I = ctypes.c_void_p, ctypes.c_int64


class CpuKVWrite:
    """The `kv_cache.KVWrite` of a CPU cache (see `kv_cache.kv_write_for`)."""

    def __init__(self):
        self._kernel = load_kernel(SOURCE, {}).kv_write
        self._kernel.argtypes = [_P, _P, _I, _I, _P, _I, _I, _P, _P, _I, ctypes.c_int]
        self._kernel.restype = _I

    def __call__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor) -> None:
        capacity = k_cache.shape[0]
        k, v = _rows(k, k_cache), _rows(v, v_cache)
        slots = slots.to(torch.int64).contiguous()
        if slots.shape != (k.shape[0],) or v.shape != k.shape:
            raise ValueError(f"{tuple(slots.shape)} slots for K {tuple(k.shape)} and V {tuple(v.shape)}")
        outside = self._kernel(k.data_ptr(), v.data_ptr(), k.stride(0) * k.element_size(),
                               v.stride(0) * v.element_size(), slots.data_ptr(), k.shape[0],
                               k_cache[0].numel() * k_cache.element_size(), k_cache.data_ptr(),
                               v_cache.data_ptr(), capacity, torch.get_num_threads())
        if outside:
            raise IndexError(f"{outside} of {k.shape[0]} slots are outside the cache's {capacity}")


def _rows(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """`x` `[tokens, kv_heads, head_dim]` with each token's row contiguous (the rows
    may be apart, as views of a fused projection are)."""
    if x.shape[1:] != cache.shape[1:] or x.dtype != cache.dtype:
        raise ValueError(f"rows {tuple(x.shape)} {x.dtype} for a cache of "
                         f"{tuple(cache.shape)} {cache.dtype}")
    if x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        return x.contiguous()
    return x
