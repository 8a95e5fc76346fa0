"""The projections of a model (`x @ weight.T + bias` over token rows), each with
its weight laid out once, when the runner is built, for the kernel that runs it
fastest on the device. `projection` is the one place that choice is made."""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F


class Projection(Protocol):
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """`[rows, in]` to `[rows, out]`."""


class DenseProjection:
    """`F.linear` on the weight as transformers keeps it, except that on the CPU 2
    or 3 rows are padded to 4: for so few rows torch's CPU path streams the weights
    once per row (measured with one thread: 2 rows cost 2.4 times one row, 4 rows
    1.7 times), which makes small decode batches slower than bigger ones."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight, self.bias = weight, bias
        self.pads = weight.device.type == "cpu"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if self.pads and 1 < rows < 4:
            return F.linear(F.pad(x, (0, 0, 0, 4 - rows)), self.weight, self.bias)[:rows]
        return F.linear(x, self.weight, self.bias)


class PackedProjection:
    """bf16 on a CPU with AMX or AVX-512 bf16: the weight reordered once into oneDNN's
    blocked layout, which its matmul would otherwise rebuild from the plain one on
    every call (measured with one thread, 576 to 3072: 0.29 against 0.19 ms a call
    for up to 8 rows, 0.70 against 0.53 ms for 128). Results are the plain call's
    to the bit."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        # The row count is only a hint to the reorder; any batch may use the result.
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, 32)
        self.bias = bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


def packs(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether projections on `device` in `dtype` use oneDNN's packed weights."""
    return (device.type == "cpu" and dtype == torch.bfloat16
            and torch.backends.mkldnn.is_available()
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def projection(weight: torch.Tensor, bias: torch.Tensor | None) -> Projection:
    """The projection by `weight` (`[out, in]`, on the runner's device and dtype)."""
    if packs(weight.device, weight.dtype):
        return PackedProjection(weight, bias)
    return DenseProjection(weight, bias)
