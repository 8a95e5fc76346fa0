"""What the live engine attaches to each core request as its payload."""
from __future__ import annotations

from dataclasses import dataclass, field


SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1
"""The seeds a torch generator takes."""

MIN_TEMPERATURE = 1e-5
"""Below this a temperature is greedy (as vLLM's): dividing logits by less makes
them overflow to infinity, and the distribution NaN."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """temperature 0 (or below MIN_TEMPERATURE) is greedy. A seed makes a sampled
    request give the same tokens alone and under any concurrency."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self):
        if not 0 <= self.temperature < float("inf"):
            raise ValueError("temperature must be >= 0 and finite")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be in [{SEED_MIN}, {SEED_MAX}]")

    @property
    def greedy(self) -> bool:
        return self.temperature < MIN_TEMPERATURE


@dataclass(frozen=True, slots=True)
class GenerationInput:
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
