"""One cell's verdict: each figure's live runs (their median and spread) against
the simulator's, and whether the simulator is within its bound of live's median.

The bounds are fixed, whatever live's own spread: TTFT p50 ±10%, TTFT p99 and
stall p99 ±20%, throughput ±5%, wasted tokens within one a leaver, preemptions
equal; the gap p99 is shown, unbounded. The spread, (max - min) / median over the
runs, is shown beside each error so that a reader sees when live itself moves by
more than the bound. Live is judged against itself too, each run in the
simulator's place against the median of the other runs: where a live run misses
the bound, the bound is below what this host repeats, and no simulator can be
shown within it there. The counts that follow from the trace and the scheduler
alone (requests completed and left, tokens read) are kept for each side too: they
must agree exactly.

The host's pace is read two ways, and the simulator is judged again at each, its
prices scaled to the cell's pace: by price checks, a short fixed load run before
and after each live run (`price_check`), which read nothing of the workload
judged, as a user checks the host before a what-if (the cell's pace: all its
checks' steps together, one longer check); and by each run's own steps over the
profile's price of the same steps, which no profile can know beforehand: what
the model is worth apart from the speed the host happened to run at while the
cell ran (the cell's pace: the runs' median)."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

FIGURES = ("ttft_client_p50_s", "ttft_client_p99_s", "gap_p99_s", "stall_p99_s",
           "throughput_tok_s", "wasted_tokens", "preemptions")
"""The figures each cell is judged on, in the table's order."""

BOUNDS = {"ttft_client_p50_s": 0.10, "ttft_client_p99_s": 0.20, "stall_p99_s": 0.20,
          "throughput_tok_s": 0.05, "preemptions": 0.0}
"""Relative error allowed; for preemptions, the difference (none). Wasted tokens
are allowed one a leaver."""

COUNTED = ("wasted_tokens", "preemptions")
"""Figures that are counts: their error is the difference, in the count's units."""

EXACT = ("completed", "left", "tokens_read")
"""Counts both sides must agree on exactly."""


@dataclass(frozen=True)
class Judged:
    figure: str
    live: list[float | None]
    """Each live run's figure, in run order."""
    live_median: float | None
    spread: float | None
    """(max - min) / median of the live runs; for counts, max - min."""
    sim: float | None
    error: float | None
    """Relative to live's median; for counts, sim - median."""
    bound: float | None
    """None: shown, not judged."""
    ok: bool | None
    """None where it is not judged, or a side has no figure (no stall, say)."""
    live_error: float | None = None
    """The largest error of one live run against the median of the others (in
    `error`'s units); None with fewer than two runs."""
    live_ok: bool | None = None
    """Whether every live run, judged as the simulator is against the median of
    the others, was within the bound; None where nothing is judged."""


def judge(figure: str, live: list[float | None], sim: float | None, leavers: int) -> Judged:
    values = [v for v in live if v is not None]
    bound = float(leavers) if figure == "wasted_tokens" else BOUNDS.get(figure)
    if not values or sim is None:
        return Judged(figure, live, None, None, sim, None, bound, None)
    median = statistics.median(values)
    spread = float(max(values) - min(values))
    if figure not in COUNTED:
        spread = spread / median if median else 0.0
    error = _error(figure, sim, median)
    against_others = [_error(figure, v, statistics.median(values[:i] + values[i + 1:]))
                      for i, v in enumerate(values)] if len(values) > 1 else []
    known = [e for e in against_others if e is not None]
    live_error = max(known, key=abs) if known else None
    return Judged(figure, live, median, spread, sim, error, bound, _within(error, bound),
                  live_error, None if bound is None or not known else
                  all(_within(e, bound) for e in known))


def _error(figure: str, value: float, median: float) -> float | None:
    """`value` against `median`: the difference for counts, else relative (None
    against a zero median, unless `value` is zero too)."""
    if figure in COUNTED:
        return float(value - median)
    return (value - median) / median if median else (0.0 if value == 0 else None)


def _within(error: float | None, bound: float | None) -> bool | None:
    return None if bound is None or error is None else abs(error) <= bound


@dataclass(frozen=True)
class Repriced:
    """The simulator judged again with its prices times `pace`, the host's pace as
    one reading of it gives for the cell (None: not read); `paces`: that reading
    for each live run."""
    paces: list[float | None] = field(default_factory=list)
    pace: float | None = None
    judged: list[Judged] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    """The simulator's `EXACT` counts at those prices."""


Repricing = tuple[list[float | None], float | None, dict | None]
"""Each run's pace, the cell's, and the simulated side's summary with its prices
times the cell's (None: no pace known)."""


@dataclass(frozen=True)
class CellVerdict:
    trace: str
    settings: str
    runs: int
    judged: list[Judged]
    counts: dict[str, dict]
    """For each of `EXACT`: `live` (each run's) and `sim`."""
    beyond_fit: list[str]
    """The features the simulated replay took past the profile's fit."""
    sim_settings: dict = field(default_factory=dict)
    """The settings the simulated side ran (`build_setup`'s, the live server's
    own): with them another profile can be judged on the same live runs."""
    at_check: Repriced = field(default_factory=Repriced)
    """At the pace the price checks about each run read."""
    at_pace: Repriced = field(default_factory=Repriced)
    """At the pace each run's own steps ran."""

    @property
    def counts_agree(self) -> bool:
        return self._agree({name: c["sim"] for name, c in self.counts.items()})

    def _agree(self, sim: dict[str, int]) -> bool:
        """Every live run's `EXACT` counts equal to `sim`'s."""
        return all(set(c["live"]) == {sim[name]} for name, c in self.counts.items())

    @property
    def served(self) -> bool:
        """Whether either side served any request: where neither did (a pool too
        small for every request of the trace refuses them all), the cell has nothing
        to judge beyond its counts."""
        return any(c["sim"] or any(c["live"]) for name, c in self.counts.items()
                   if name in ("completed", "left"))

    @property
    def ok(self) -> bool | None:
        """Within every bound, the counts equal; None where nothing was served."""
        if not self.served:
            return None
        return self.counts_agree and all(j.ok is not False for j in self.judged)

    def ok_at(self, repriced: Repriced) -> bool | None:
        """Within bounds with the simulator's prices repriced; None where no pace
        is known or nothing was served."""
        if not repriced.judged or not self.served:
            return None
        return self._agree(repriced.counts) and all(j.ok is not False for j in repriced.judged)

    @property
    def ok_at_check(self) -> bool | None:
        return self.ok_at(self.at_check)

    @property
    def ok_at_pace(self) -> bool | None:
        return self.ok_at(self.at_pace)

    @property
    def live_ok(self) -> bool | None:
        """Every live run within the bounds of the median of the others; None with
        one run."""
        if self.runs < 2 or not self.served:
            return None
        return all(j.live_ok is not False for j in self.judged)

    def as_dict(self) -> dict:
        return {"trace": self.trace, "settings": self.settings, "runs": self.runs, "ok": self.ok,
                "live_ok": self.live_ok,
                "counts": self.counts, "counts_agree": self.counts_agree,
                "beyond_fit": self.beyond_fit, "sim_settings": self.sim_settings,
                "figures": [asdict(j) for j in self.judged],
                **_repriced("check", self.at_check, self.ok_at_check),
                **_repriced("pace", self.at_pace, self.ok_at_pace)}


def _repriced(name: str, repriced: Repriced, ok: bool | None) -> dict:
    return {f"{name}s": repriced.paces, name: repriced.pace, f"ok_at_{name}": ok,
            f"counts_at_{name}": repriced.counts,
            f"figures_at_{name}": [asdict(j) for j in repriced.judged]}


def cell_verdict(trace: str, settings: str, live: list[dict], sim: dict, leavers: int,
                 beyond_fit: list[str], sim_settings: dict | None = None,
                 at_check: Repricing = ([], None, None),
                 at_pace: Repricing = ([], None, None)) -> CellVerdict:
    """`live`: each run's summary (`Summary.as_dict()`, or at least `FIGURES` and
    `EXACT`); `sim`: the simulated side's. `at_check` and `at_pace`: the host's
    pace as the price checks read it and as the runs' own steps ran, with the
    simulated side at it."""
    def judged(side: dict) -> list[Judged]:
        return [judge(f, [r[f] for r in live], side[f], leavers) for f in FIGURES]

    def repriced(paces: list[float | None], pace: float | None, side: dict | None) -> Repriced:
        if side is None:
            return Repriced(list(paces), pace)
        return Repriced(list(paces), pace, judged(side), {name: side[name] for name in EXACT})

    return CellVerdict(trace, settings, len(live), judged(sim),
                       {name: {"live": [r[name] for r in live], "sim": sim[name]}
                        for name in EXACT},
                       beyond_fit, dict(sim_settings or {}), repriced(*at_check),
                       repriced(*at_pace))


def recorded_runs(cell: dict) -> list[dict]:
    """Each live run of a cell as `validate.json` keeps it: its figures and counts."""
    columns = {f["figure"]: f["live"] for f in cell["figures"]}
    columns.update({name: c["live"] for name, c in cell["counts"].items()})
    return [{name: values[i] for name, values in columns.items()} for i in range(cell["runs"])]
