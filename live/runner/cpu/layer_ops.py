"""A Llama layer's elementwise steps on the CPU as compiled kernels
(`layer_ops.cpp`): each step one pass over the rows, rounding where
transformers' bf16 forward rounds, instead of several torch ops with a temporary
each (for SmolLM2 at 128 rows, a third of a decode step's time in eager torch)."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from .build import load_kernel

SOURCE = Path(__file__).with_name("layer_ops.cpp")
DTYPES = (torch.float32, torch.bfloat16)

_P, _I, _F, _T = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
_SIGNATURES = {
    "rms_norm": [_P, _P, _P, _I, _I, _F, _T],
    "add_rms_norm": [_P, _P, _P, _P, _I, _I, _F, _T],
    "rotate": [_P, _I, _I, _I, _I, _P, _P, _T],
    "silu_mul": [_P, _P, _I, _I, _T],
}


class CpuLayerOps:
    """The `layer_ops.LayerOps` the runner uses on the CPU (see `layer_ops.layer_ops_for`)."""

    def __init__(self, eps: float):
        library = load_kernel(SOURCE, {})
        self.eps = eps
        self._kernels = {}
        for name, argtypes in _SIGNATURES.items():
            for dtype in DTYPES:
                kernel = getattr(library, f"{name}_{str(dtype).removeprefix('torch.')}")
                kernel.argtypes, kernel.restype = argtypes, None
                self._kernels[name, dtype] = kernel

    def rms_norm(self, x, weight):
        x = _rows(x)
        weight, out = _same(weight, x), torch.empty_like(x)
        self._kernels["rms_norm", x.dtype](x.data_ptr(), weight.data_ptr(), out.data_ptr(),
                                           x.shape[0], x.shape[1], self.eps, torch.get_num_threads())
        return out

    def add_rms_norm(self, residual, delta, weight):
        _rows(residual, contiguous=True)
        delta, weight = _same(_rows(delta), residual), _same(weight, residual)
        out = torch.empty_like(residual)
        self._kernels["add_rms_norm", residual.dtype](
            residual.data_ptr(), delta.data_ptr(), weight.data_ptr(), out.data_ptr(),
            residual.shape[0], residual.shape[1], self.eps, torch.get_num_threads())
        return out

    def rotate(self, x, cos, sin):
        tokens, heads, dim = x.shape
        if x.stride(2) != 1 or x.stride(1) != dim or dim % 2:
            raise ValueError(f"rotating heads of {dim} needs them contiguous (strides {x.stride()})")
        cos, sin = _same(cos.reshape(tokens, dim), x), _same(sin.reshape(tokens, dim), x)
        self._kernels["rotate", x.dtype](x.data_ptr(), tokens, x.stride(0), heads, dim,
                                         cos.data_ptr(), sin.data_ptr(), torch.get_num_threads())
        return x

    def gated(self, gate_up):
        gate_up = _rows(gate_up)
        out = gate_up.new_empty(gate_up.shape[0], gate_up.shape[1] // 2)
        self._kernels["silu_mul", gate_up.dtype](gate_up.data_ptr(), out.data_ptr(), out.shape[0],
                                                 out.shape[1], torch.get_num_threads())
        return out


def _rows(x: torch.Tensor, contiguous: bool = False) -> torch.Tensor:
    """`[rows, width]` laid out row after row (a copy unless it is, or an error when
    the caller's tensor must be the one written)."""
    if x.dim() != 2 or x.dtype not in DTYPES:
        raise ValueError(f"expected [rows, width] in {DTYPES}, not {tuple(x.shape)} {x.dtype}")
    if x.is_contiguous():
        return x
    if contiguous:
        raise ValueError("the residual is written in place: it must be contiguous")
    return x.contiguous()


def _same(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if t.dtype != like.dtype:
        raise ValueError(f"{t.dtype} beside {like.dtype}")
    return t.contiguous()
