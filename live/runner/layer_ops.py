"""The elementwise steps of a Llama layer between its projections: the RMS norm
(alone, and after the residual connection that feeds it), the rotary embedding of
q and k, and the gated activation. `layer_ops_for` is the one place they are
chosen: the compiled CPU kernels of `cpu.layer_ops` where they build, else torch's
ops here, the reference (transformers' own arithmetic). Also the activations that
configs name."""
from __future__ import annotations

import logging
from typing import Protocol

import torch
import torch.nn.functional as F

log = logging.getLogger("twinstep.runner")

ACTIVATIONS = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
}


def activation(name: str):
    if name not in ACTIVATIONS:
        raise NotImplementedError(f"activation {name!r} is not supported ({', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class LayerOps(Protocol):
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...

    def add_rms_norm(self, residual: torch.Tensor, delta: torch.Tensor,
                     weight: torch.Tensor) -> torch.Tensor:
        """`residual += delta` in place; the norm of the sum."""

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x `[tokens, heads, head_dim]` rotated by cos and sin `[tokens, 1, head_dim]`;
        may rotate x in place."""

    def gated(self, gate_up: torch.Tensor) -> torch.Tensor:
        """`act(gate) * up` of `[tokens, 2 * width]`, gate the first half."""


class TorchLayerOps:
    def __init__(self, eps: float, act: str):
        self.eps, self.act = eps, activation(act)

    def rms_norm(self, x, weight):
        # In float32 whatever the dtype, as the reference implementation does.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    def add_rms_norm(self, residual, delta, weight):
        return self.rms_norm(residual.add_(delta), weight)

    def rotate(self, x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos + rotated * sin

    def gated(self, gate_up):
        gate, up = gate_up.chunk(2, -1)
        return self.act(gate) * up


def layer_ops_for(device: torch.device, dtype: torch.dtype, eps: float, act: str) -> LayerOps:
    """The compiled kernels on the CPU for float32 and bfloat16 with SiLU when they
    build; else torch's ops."""
    if device.type == "cpu" and act == "silu":
        from .cpu.layer_ops import DTYPES, CpuLayerOps
        from .cpu.build import NativeBuildError
        if dtype in DTYPES:
            try:
                return CpuLayerOps(eps)
            except NativeBuildError as exc:
                log.warning("the CPU layer kernels are not available, Llama layers take "
                            "torch's ops: %s", exc)
    return TorchLayerOps(eps, act)
