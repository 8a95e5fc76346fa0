"""Fit a `LinearCost` from a live step log with non-negative least squares, and say
how well it predicts steps it was not fitted on.

A step log is JSONL, one line per step: the `PlanFeatures` fields plus `step`,
`start_s`, `duration_s` (seconds) and maybe `device`."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from .cost_model import FEATURES, LinearCost


def load_step_log(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass(frozen=True)
class FitReport:
    """Errors of the fitted model on the held-out steps."""

    train_steps: int
    holdout_steps: int
    mape: float
    """Mean absolute relative error."""
    p90_rel_error: float
    """90th percentile of the absolute relative error."""
    r2: float

    def as_dict(self) -> dict:
        return asdict(self)


def design_matrix(steps: list[dict]) -> np.ndarray:
    """One row per step, one column per term of FEATURES (`fixed` is 1)."""
    x = np.array([[s[f] for f in FEATURES[1:]] for s in steps], dtype=float).reshape(len(steps), -1)
    return np.hstack([np.ones((len(steps), 1)), x])


def fit(steps: list[dict], holdout_fraction: float = 0.2, seed: int = 0) -> tuple[LinearCost, FitReport]:
    if not 0 < holdout_fraction < 1:
        raise ValueError("holdout_fraction must be in (0, 1)")
    x = design_matrix(steps)
    y = np.array([s["duration_s"] for s in steps], dtype=float)
    if (y <= 0).any():
        raise ValueError("every step's duration_s must be positive")
    n_hold = max(1, round(len(steps) * holdout_fraction))
    if len(steps) - n_hold < len(FEATURES):
        raise ValueError(f"{len(steps)} steps are too few to fit {len(FEATURES)} terms and hold some out")
    order = np.random.default_rng(seed).permutation(len(steps))
    hold, train = order[:n_hold], order[n_hold:]
    coef = _nnls(x[train], y[train])
    actual = y[hold]
    error = x[hold] @ coef - actual
    rel = np.abs(error) / actual
    total = ((actual - actual.mean()) ** 2).sum()
    report = FitReport(
        train_steps=len(train), holdout_steps=len(hold),
        mape=float(rel.mean()), p90_rel_error=float(np.quantile(rel, 0.9)),
        r2=float(1 - (error ** 2).sum() / total) if total > 0 else float("nan"))
    return LinearCost(**dict(zip(FEATURES, map(float, coef)))), report


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NNLS on columns scaled to unit norm (the features span ten orders of
    magnitude); a column that is all zero gets coefficient 0."""
    norms = np.linalg.norm(x, axis=0)
    used = norms > 0
    coef = np.zeros(x.shape[1])
    scaled, _ = nnls(x[:, used] / norms[used], y)
    coef[used] = scaled / norms[used]
    return coef
