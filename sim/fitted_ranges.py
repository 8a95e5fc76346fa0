"""What a profile's fit has seen, and a replay that goes past it.

A fitted step-cost model is measured inside the ranges its calibration covered
and extrapolated beyond them: a batch twice the largest calibrated, a prompt
longer than any prefilled there. A profile keeps the largest value of each
feature among the steps it was fitted on (`FittedRanges`); `RangeWatch` runs a
replay's step costs through the model and notes the largest value each feature
reached beyond that, so that the replay can say once, at its end, where its
figures rest on extrapolation and how far."""
from __future__ import annotations

from dataclasses import dataclass

from scheduler import PlanFeatures

from .cost_model import CostModel

WATCHED = ("num_prefills", "prefill_tokens", "decode_batch", "context_tokens", "prefix_tokens")
"""Prompts prefilled in one step, their tokens, the decode batch, the context it
reads, and the prompt tokens chunks read back: the kinds of work a what-if moves."""

MEANING = {
    "num_prefills": "prompts prefilled in one step",
    "prefill_tokens": "prompt tokens prefilled in one step",
    "decode_batch": "sequences decoded in one step",
    "context_tokens": "context tokens a decode batch reads",
    "prefix_tokens": "prompt tokens chunks of one step read back from the cache",
}


@dataclass(frozen=True)
class FittedRanges:
    """The largest value of each `WATCHED` feature among the fitted steps."""

    num_prefills: int
    prefill_tokens: int
    decode_batch: int
    context_tokens: int
    prefix_tokens: int = 0
    """A profile saved before chunks' prefixes were recorded fitted none."""

    @classmethod
    def of(cls, steps: list[dict]) -> FittedRanges:
        return cls(**{name: max((int(s.get(name, 0)) for s in steps), default=0)
                      for name in WATCHED})

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in WATCHED}


@dataclass(frozen=True)
class Beyond:
    """A feature a replay took past its profile's fit."""

    feature: str
    fitted: int
    """The largest value among the fitted steps."""
    reached: int
    """The largest value in the replay."""

    def describe(self) -> str:
        times = f"{self.reached / self.fitted:.1f} times" if self.fitted else "none fitted"
        return (f"{MEANING[self.feature]} ({self.feature}) reached {self.reached:,}; the profile "
                f"was fitted up to {self.fitted:,} ({times}): step costs there are extrapolated")


class RangeWatch:
    """A cost model that answers as `cost` does and notes each feature's largest
    value beyond `ranges`. Five comparisons a step: within the ranges, nothing else."""

    def __init__(self, cost: CostModel, ranges: FittedRanges):
        self._cost = cost.cost
        self.ranges = ranges
        self._most = ranges.as_dict()
        self._limits = tuple(self._most.values())

    def cost(self, f: PlanFeatures) -> float:
        prompts, tokens, batch, context, prefix = self._limits
        if (f.num_prefills > prompts or f.prefill_tokens > tokens or f.decode_batch > batch
                or f.context_tokens > context or f.prefix_tokens > prefix):
            self._note(f)
        return self._cost(f)

    def _note(self, f: PlanFeatures) -> None:
        most = self._most
        for name in WATCHED:
            most[name] = max(most[name], getattr(f, name))
        self._limits = tuple(most.values())

    def beyond(self) -> list[Beyond]:
        """The features that went past the fit, with how far, in `WATCHED` order."""
        fitted = self.ranges.as_dict()
        return [Beyond(name, fitted[name], self._most[name]) for name in WATCHED
                if self._most[name] > fitted[name]]
