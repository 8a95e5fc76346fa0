"""Fit a `LinearCost` from a live step log with non-negative least squares, and say
how well it predicts steps it was not fitted on.

The fit goes in two stages, as the work does: the decode-only steps price what
every step pays (a fixed cost, a sequence decoded, a context token read, each
batch size's own cost beside the line where it holds); the steps
with prompt work then price the prompts (a prompt, a token, attention's square,
a prefix read back) over what their decodes cost at those prices. Fitted in one
go, the long prefills' seconds would set the decode terms too, and terms that rise
together (a batch's sequences and their context) would share their costs
differently from one calibration to the next. Both stages are then fitted again
on each step's seconds over the host's pace about it (`host_pace`), so that a slow
minute of a shared host during one phase of a calibration does not become the
price of that phase's kind of step.

A step log is JSONL, one line per step in the order the steps ran: the
`PlanFeatures` fields plus `step`, `start_s`, `duration_s` (seconds) and maybe
`device`."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from scheduler import PlanFeatures

from .cost_model import FEATURES, CostModel, LinearCost


def load_step_log(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_step_log(path: str | Path, steps: list[dict]) -> None:
    Path(path).write_text("".join(json.dumps(s) + "\n" for s in steps))


KINDS = ("decode", "prefill", "mixed", "chunked")
"""Steps by the work they do: decodes alone, prompts alone, both, and any step
with a chunk that continues a prompt or leaves it unfinished. One pooled error
hides a kind the fit misses when the other kinds are many."""


def step_kind(step: dict) -> str:
    """A logged step's kind (a log without `chunked` has no chunked step)."""
    if step.get("chunked"):
        return "chunked"
    if not step["num_prefills"]:
        return "decode"
    return "mixed" if step["decode_batch"] else "prefill"


@dataclass(frozen=True)
class FitReport:
    """Errors of the fitted model on the held-out steps, pooled and by kind."""

    train_steps: int
    holdout_steps: int
    mape: float
    """Mean absolute relative error."""
    p90_rel_error: float
    """90th percentile of the absolute relative error."""
    r2: float
    by_kind: dict[str, dict] = field(default_factory=dict)
    """For each of `KINDS` among the held-out steps: `steps`, `mape` and
    `p90_rel_error` of those steps alone."""

    def as_dict(self) -> dict:
        return asdict(self)

    def describe_kinds(self) -> str:
        """One line: each kind's held-out error."""
        return "; ".join(f"{kind} {e['mape']:.1%} (p90 {e['p90_rel_error']:.1%}, {e['steps']} steps)"
                         for kind, e in self.by_kind.items())


def design_matrix(steps: list[dict]) -> np.ndarray:
    """One row per step, one column per term of FEATURES (`fixed` is 1). A log
    written before a feature was recorded has none of it."""
    x = np.array([[s.get(f, 0) for f in FEATURES[1:]] for s in steps],
                 dtype=float).reshape(len(steps), -1)
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
    hold, train = order[:n_hold], np.sort(order[n_hold:])
    trained = [steps[i] for i in train]
    cost = _fitted_terms(x[train], y[train], trained)
    # Paced against every size's own cost: a calibration holds one size for a dozen
    # steps, so a size's cost left out would be read as the host's pace about them.
    host = host_pace(trained, _fitted_terms(x[train], y[train], trained, held_in_time=False))
    if host is not None:
        cost = _fitted_terms(x[train], y[train] / host,
                             [dict(s, duration_s=s["duration_s"] / h) for s, h in zip(trained, host)])
    actual = y[hold]
    error = np.array([cost.cost(step_features(steps[i])) for i in hold]) - actual
    rel = np.abs(error) / actual
    total = ((actual - actual.mean()) ** 2).sum()
    kinds = np.array([step_kind(steps[i]) for i in hold])
    report = FitReport(
        train_steps=len(train), holdout_steps=len(hold),
        mape=float(rel.mean()), p90_rel_error=float(np.quantile(rel, 0.9)),
        r2=float(1 - (error ** 2).sum() / total) if total > 0 else float("nan"),
        by_kind={kind: {"steps": int((kinds == kind).sum()), "mape": float(rel[kinds == kind].mean()),
                        "p90_rel_error": float(np.quantile(rel[kinds == kind], 0.9))}
                 for kind in KINDS if (kinds == kind).any()})
    return cost, report


def _fitted_terms(x: np.ndarray, y: np.ndarray, steps: list[dict], held_in_time: bool = True) -> LinearCost:
    coef = _staged(x, y)
    linear = LinearCost(**dict(zip(FEATURES, map(float, coef))))
    return _with_batch_excess(linear, steps, y - x @ coef, held_in_time)


PACE_NEIGHBOURS = 16
"""Decode-only steps, the nearest in time, that a step's host pace is read from:
a few seconds' worth where a calibration decodes, more where it prefills."""


def host_pace(steps: list[dict], cost: CostModel) -> np.ndarray | None:
    """How fast the host ran about each step, against the log as a whole: the median
    of the nearest decode-only steps' seconds over `cost`'s price of them, over the
    median of all of them (1.08: the host ran 8% slower than usual then). A shared
    host runs 10% slow or fast for tens of seconds at a time, and a calibration's
    phases (the decode ladder, the prompts, the chunks on a second server) fall in
    different stretches: fitted on raw seconds, what a prompt costs against a
    decode would carry the stretches' difference, one calibration pricing chunk
    steps 7% above the next. None for a log without `start_unix` or with too few
    decode-only steps."""
    decodes = [s for s in steps if step_kind(s) == "decode"]
    if len(decodes) < PACE_NEIGHBOURS or any("start_unix" not in s for s in steps):
        return None
    when = np.array([s["start_unix"] for s in decodes])
    order = np.argsort(when, kind="stable")
    when = when[order]
    ratio = np.array([decodes[i]["duration_s"] / cost.cost(step_features(decodes[i])) for i in order])
    at = np.array([s["start_unix"] for s in steps])
    # The nearest k lie within k places either side of where a step falls in time.
    span = min(len(when), 2 * PACE_NEIGHBOURS)
    first = np.clip(np.searchsorted(when, at) - PACE_NEIGHBOURS, 0, len(when) - span)
    around = first[:, None] + np.arange(span)
    nearest = np.take_along_axis(around, np.argsort(np.abs(when[around] - at[:, None]), axis=1), axis=1)
    return np.median(ratio[nearest[:, :PACE_NEIGHBOURS]], axis=1) / np.median(ratio)


def pace(steps: list[dict], cost: CostModel) -> float:
    """The steps' measured seconds over the seconds `cost` prices the very same steps
    at: how fast the host ran them against its calibration (1.10: a tenth slower).
    On a shared host it moves from minute to minute, whatever the model."""
    if not steps:
        raise ValueError("no steps to pace")
    return sum(s["duration_s"] for s in steps) / sum(cost.cost(step_features(s)) for s in steps)


MIN_STEPS_PER_BATCH = 3
"""Decode-only steps of a batch size that each half needs for the size's correction
to be tried."""


def _with_batch_excess(linear: LinearCost, steps: list[dict], residuals: np.ndarray,
                       held_in_time: bool = True) -> LinearCost:
    """The linear model with a per-batch-size correction where it earns its place:
    at each batch size whose correction holds over time, the earlier half of that
    size's decode-only steps predicting the later half better than the linear
    terms alone, and the later the earlier (on noise it would only add noise). One
    size can bend (a single sequence through a CPU's matrix-vector path, say) while
    the rest stay linear. Halves in time, not drawn at random: a shared host runs
    slow for tens of seconds at a time, and random halves of a size measured in
    one such stretch would both carry its slowness. `steps` are in the order they
    ran. `held_in_time` False keeps every size's correction, tested or not."""
    kept = {}
    for batch, idx in _decode_batches(steps).items():
        if len(idx) < 2 * MIN_STEPS_PER_BATCH:
            continue
        earlier, later = idx[:len(idx) // 2], idx[len(idx) // 2:]
        holds = not held_in_time or all(_corrects(linear, float(np.median(residuals[a])), [steps[i] for i in b])
                                        for a, b in ((earlier, later), (later, earlier)))
        kept[batch] = float(np.median(residuals[idx])) if holds else 0.0
    if not any(kept.values()):
        return linear
    sizes = sorted(kept)
    excess = np.interp(np.arange(1, sizes[-1] + 1), sizes, [kept[b] for b in sizes])
    return replace(linear, batch_excess=tuple(float(v) for v in excess))


def _corrects(linear: LinearCost, correction: float, steps: list[dict]) -> bool:
    """Whether `steps` are closer to the linear terms plus `correction` than to them alone."""
    return _rel_error(replace(linear, fixed=linear.fixed + correction), steps) < _rel_error(linear, steps)


def _rel_error(cost: LinearCost, steps: list[dict]) -> float:
    return sum(abs(cost.cost(step_features(s)) / s["duration_s"] - 1) for s in steps)


def _decode_batches(steps: list[dict]) -> dict[int, list[int]]:
    """The indices of the decode-only steps, by batch size."""
    by_batch: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        if step["num_prefills"] == 0 and step["decode_batch"] > 0:
            by_batch.setdefault(step["decode_batch"], []).append(i)
    return by_batch


def step_features(step: dict) -> PlanFeatures:
    """A logged step's features, as the plan that made it had them."""
    return PlanFeatures(**{name: step[name] for name in PlanFeatures.__slots__ if name in step})


DECODE_TERMS = ("fixed", "decode_batch", "context_tokens")
"""The terms a decode-only step pays, fitted on those steps alone."""


def _staged(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The decode terms from the decode-only steps, then the prompt terms from the
    rest of the steps less their decode terms' cost. A log with too few steps of
    either kind is fitted in one go."""
    decode_cols = [FEATURES.index(t) for t in DECODE_TERMS]
    prompt_cols = [i for i in range(len(FEATURES)) if i not in decode_cols]
    decode_only = x[:, FEATURES.index("num_prefills")] == 0
    if min(decode_only.sum(), (~decode_only).sum()) < 2 * len(FEATURES):
        return _nnls(x, y)
    coef = np.zeros(len(FEATURES))
    coef[decode_cols] = _decode_terms(x[decode_only][:, decode_cols], y[decode_only])
    prompt = ~decode_only
    decodes_cost = x[prompt][:, decode_cols] @ coef[decode_cols]
    coef[prompt_cols] = _nnls(x[prompt][:, prompt_cols], y[prompt] - decodes_cost)
    return coef


def _decode_terms(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """`DECODE_TERMS` from decode-only steps (`x`'s columns in that order): a
    context token's price from how steps of one batch size differ, the cost of
    each size measured `2 * MIN_STEPS_PER_BATCH` times left free (the rest share
    a line), then the fixed and per-sequence costs as the line through every
    size's cost, each size weighed by its steps. One line through all of the steps
    at once would bend to sizes that cost more or less than it (a CPU's matrix
    kernels favour some row counts), and where a calibration reads long contexts
    at one size only, the context price would take up that size's bend."""
    batch = x[:, 1]
    sizes, size_of, counts = np.unique(batch, return_inverse=True, return_counts=True)
    free = counts >= 2 * MIN_STEPS_PER_BATCH
    own = np.zeros((len(y), free.sum()))
    rows = free[size_of]
    own[np.flatnonzero(rows), np.cumsum(free)[size_of[rows]] - 1] = 1.0
    shared = np.column_stack([~rows, batch * ~rows]).astype(float)
    solved = _nnls(np.column_stack([x[:, 2], own, shared]), y)
    per_context, own_costs, (line_fixed, line_per_sequence) = solved[0], solved[1:-2], solved[-2:]
    size_costs = line_fixed + line_per_sequence * sizes
    size_costs[free] = own_costs
    weight = np.sqrt(counts)
    fixed, per_sequence = _nnls(np.column_stack([weight, weight * sizes]), weight * size_costs)
    return np.array([fixed, per_sequence, per_context])


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NNLS on columns scaled to unit norm (the features span ten orders of
    magnitude); a column that is all zero gets coefficient 0."""
    from scipy.optimize import nnls  # imported here: it takes longer than a replay's setup

    norms = np.linalg.norm(x, axis=0)
    used = norms > 0
    coef = np.zeros(x.shape[1])
    scaled, _ = nnls(x[:, used] / norms[used], y)
    coef[used] = scaled / norms[used]
    return coef
