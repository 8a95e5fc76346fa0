"""Distributions of prompt and output lengths, in tokens, for generated traces.
Each draws whole numbers of at least 1 from a seeded numpy generator; `parse_lengths`
reads the command line's spelling of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..load import load_trace


class Lengths(Protocol):
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Fixed:
    tokens: int

    def __post_init__(self):
        if self.tokens < 1:
            raise ValueError(f"a fixed length must be at least 1 token, got {self.tokens}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.tokens, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Uniform:
    """Every length from `low` to `high`, both included, equally likely."""

    low: int
    high: int

    def __post_init__(self):
        if not 1 <= self.low <= self.high:
            raise ValueError(f"uniform lengths need 1 <= low <= high, got {self.low} and {self.high}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True)


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Half the lengths are below `median`; `sigma` is the spread of their logarithm
    (0.5 puts the 90th percentile near 1.9 times the median). Rounded, at least 1."""

    median: float
    sigma: float

    def __post_init__(self):
        if not self.median > 0 or not self.sigma >= 0:
            raise ValueError(f"lognormal lengths need median > 0 and sigma >= 0, "
                             f"got {self.median} and {self.sigma}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        drawn = rng.lognormal(np.log(self.median), self.sigma, size=n)
        return np.maximum(np.rint(drawn), 1).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Resampled:
    """Lengths drawn, with replacement, from those of a real trace."""

    values: tuple[int, ...]

    def __post_init__(self):
        if not self.values or min(self.values) < 1:
            raise ValueError("resampled lengths need at least one length, all at least 1")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, replace=True)


SPECS = "fixed:N, uniform:LOW:HIGH, lognormal:MEDIAN:SIGMA or trace:PATH"
_SHAPES = {"fixed": (Fixed, (int,)), "uniform": (Uniform, (int, int)),
           "lognormal": (LogNormal, (float, float))}


def parse_lengths(spec: str, column: str) -> Lengths:
    """`column` ("prompt" or "output") says which lengths a `trace:PATH` spec takes.
    Prompt and output lengths resampled from a trace are drawn independently: each
    keeps its distribution, not their correlation."""
    kind, _, rest = spec.partition(":")
    if kind == "trace" and rest:
        requests = load_trace(rest)
        if not requests:
            raise ValueError(f"length spec {spec!r}: the trace has no requests")
        return Resampled(tuple(r.prompt_tokens if column == "prompt" else r.max_new_tokens
                               for r in requests))
    bad = ValueError(f"length spec {spec!r} is not one of {SPECS}")
    parts = rest.split(":")
    if kind not in _SHAPES or len(parts) != len(_SHAPES[kind][1]):
        raise bad
    make, converts = _SHAPES[kind]
    try:
        numbers = [convert(part) for convert, part in zip(converts, parts)]
    except ValueError:
        raise bad from None
    try:
        return make(*numbers)
    except ValueError as e:
        raise ValueError(f"length spec {spec!r}: {e}") from None
