"""How a host's step times scatter about their price.

A fitted cost model prices a step; the host takes a little more or less each
time (a tenth more one step in ten on the 2-core host, a quarter more one in a
hundred). Priced alike, every gap between two tokens of a stream is the same,
and a replay's longest gaps come out a fifth to two fifths short of a live
server's. A profile keeps the scatter its calibration measured, as quantiles of
each step's seconds over its price at the host's pace then (`host_pace`: slow
minutes are the host's, not the scatter), scaled to a mean of 1 so that a
replay's steps take as long on average as their prices say; a replay draws
each step's factor from them, seeded, so that it gives the same figures every
time."""
from __future__ import annotations

import random

import numpy as np

from .cost_model import CostModel
from .fit import host_pace, step_features

SCATTER_POINTS = 40
"""Quantiles a profile keeps: enough for the tail one step in a hundred reaches."""


def measured_scatter(steps: list[dict], cost: CostModel) -> list[float]:
    """The steps' seconds over `cost`'s price of them at the host's pace about
    each, at `SCATTER_POINTS` evenly spaced quantiles, over their mean; empty for
    a log without the clock to read the pace from."""
    pace = host_pace(steps, cost)
    if pace is None:
        return []
    ratios = np.array([s["duration_s"] / cost.cost(step_features(s)) for s in steps]) / pace
    points = np.quantile(ratios, (np.arange(SCATTER_POINTS) + 0.5) / SCATTER_POINTS)
    return [float(p) for p in points / points.mean()]


class Scatter:
    """Draws a step's factor from a profile's quantiles, each equally likely."""

    def __init__(self, quantiles: tuple[float, ...] | list[float], seed: int):
        if not quantiles or min(quantiles) <= 0:
            raise ValueError(f"a scatter needs positive quantiles, got {quantiles!r}")
        self._quantiles = tuple(quantiles)
        self._random = random.Random(seed).random

    def draw(self) -> float:
        quantiles = self._quantiles
        return quantiles[int(self._random() * len(quantiles))]
