"""Step-cost models: the seconds one step plan takes to execute."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from scheduler import PlanFeatures

FEATURES = ("fixed", "num_prefills", "prefill_tokens", "prefill_tokens_sq",
            "decode_batch", "context_tokens", "prefix_tokens")
"""The terms of `LinearCost`, in the order of its coefficients; `fixed` is 1 per step."""


MIN_STEP_S = 1e-6
"""No step is free, whatever a fit's corrections say."""


class CostModel(Protocol):
    def cost(self, features: PlanFeatures) -> float:
        """Seconds to execute a (non-empty) step with these features."""


@dataclass(frozen=True, slots=True)
class ConstantCost:
    """Every step takes the same time: for tests and hand-checked replays."""

    seconds: float

    def cost(self, features: PlanFeatures) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class LinearCost:
    """Seconds per unit of each plan feature, plus a fixed cost per step.
    `prefill_tokens_sq` carries attention's quadratic cost in the prompt length,
    `prefix_tokens` what a chunk that continues a prompt pays to read back the
    tokens before it."""

    fixed: float = 0.0
    num_prefills: float = 0.0
    prefill_tokens: float = 0.0
    prefill_tokens_sq: float = 0.0
    decode_batch: float = 0.0
    context_tokens: float = 0.0
    prefix_tokens: float = 0.0
    batch_excess: tuple[float, ...] = ()
    """Seconds a decode-only step of batch b costs above the linear terms, at index
    b - 1 (the last entry serves larger batches): on a CPU, matmuls of a few rows
    are far from linear in the rows."""

    def cost(self, f: PlanFeatures) -> float:
        seconds = (self.fixed + self.num_prefills * f.num_prefills
                   + self.prefill_tokens * f.prefill_tokens
                   + self.prefill_tokens_sq * f.prefill_tokens_sq
                   + self.decode_batch * f.decode_batch
                   + self.context_tokens * f.context_tokens
                   + self.prefix_tokens * f.prefix_tokens)
        if self.batch_excess and f.decode_batch and not f.num_prefills:
            seconds += self.batch_excess[min(f.decode_batch, len(self.batch_excess)) - 1]
        return max(seconds, MIN_STEP_S)

    def coefficients(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in FEATURES}


@dataclass(frozen=True, slots=True)
class ScaledCost:
    """Another model's prices times `factor`: the same steps on a host running
    `factor` times as slow as the one the model was fitted on."""

    model: CostModel
    factor: float

    def __post_init__(self):
        if self.factor <= 0:
            raise ValueError(f"factor must be positive, got {self.factor}")

    def cost(self, features: PlanFeatures) -> float:
        return self.model.cost(features) * self.factor
