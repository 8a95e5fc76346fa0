"""Arrival times at a mean rate: a Poisson process, or bursty (or regular) arrivals
from gamma-distributed gaps with a chosen coefficient of variation."""
from __future__ import annotations

import numpy as np


def _check(rate: float, count: int | None, duration_s: float | None, cv: float) -> None:
    if not rate > 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if not cv > 0:
        raise ValueError(f"cv must be positive, got {cv}")
    if (count is None) == (duration_s is None):
        raise ValueError("give exactly one of count and duration_s")
    if count is not None and count < 1:
        raise ValueError(f"count must be positive, got {count}")
    if duration_s is not None and not duration_s > 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")


def arrival_times(rate: float, *, count: int | None = None, duration_s: float | None = None,
                  cv: float = 1.0, rng: np.random.Generator) -> np.ndarray:
    """Seconds from the start, ascending, the first at 0 (a replay begins with work).

    Gaps between arrivals have mean 1/rate and coefficient of variation `cv`: gamma
    with shape 1/cv², which is exponential (a Poisson process) at cv = 1, bursty
    above 1 and more regular below. Either `count` arrivals, or all that fall in
    [0, duration_s).
    """
    _check(rate, count, duration_s, cv)
    shape = 1.0 / cv**2
    scale = 1.0 / (rate * shape)
    if count is not None:
        return np.concatenate(([0.0], np.cumsum(rng.gamma(shape, scale, count - 1))))
    times = [np.zeros(1)]
    end = 0.0
    while end < duration_s:
        # Draw in chunks of about the expected count, so a long duration is a few calls.
        chunk = end + np.cumsum(rng.gamma(shape, scale, int(rate * duration_s) + 16))
        times.append(chunk)
        end = chunk[-1]
    all_times = np.concatenate(times)
    return all_times[all_times < duration_s]
