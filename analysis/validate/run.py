"""Running the matrix in rounds: run 1 of every cell, then run 2 of every cell,
and so on, with one server for each setting in each round (or the one at `--url`
throughout). A shared host's speed drifts by more than the bounds over the hour a
matrix takes; runs back to back would land in one stretch of it and judge that
stretch, while rounds put a cell's runs as far apart as the matrix lasts. Each
cell is simulated with the one profile, and again at the host's pace (as a price
check on the cell's server read it about each run, and as the run's own steps
ran), and judged once its last run ends. A matrix run once can judge another
profile later (`rejudge`): the live runs are the costly part, and the simulated
side is computed again in seconds.

With a profile that measured how its steps scatter about their price, one
simulated replay is one draw, as one live run is: the simulated side is the
median of `SIM_SEEDS` replays, each figure's, as the live side is the median of
its runs."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace
from itertools import groupby
from pathlib import Path

from scheduler.settings import ServeSettings
from sim import (Profile, ReplaySetup, ScaledCost, load_step_log, pace, replay as sim_replay,
                 write_step_log)
from traces import TraceRequest

from ..compare import Comparison, compare, simulated_server
from ..live_target import Access, live_target
from ..price_check import price_check
from .matrix import SETTINGS, TRACES, Cell
from .verdict import EXACT, FIGURES, CellVerdict, Repricing, cell_verdict, recorded_runs

PRICE_CHECK_LOG = "price-check-steps.jsonl"
"""The steps of the price checks before and after a live run, beside its own."""

SIM_SEEDS = 15
"""Replays a cell's simulated side is the median of, each with its own draws of
the steps' scatter (one where the profile has none). With five, the median of
one five and of the next still stood up to 6% apart in TTFT p50 and 8% in TTFT
p99 on the matrix's small traces: too much of a 10% bound for the simulator's own
draw to take."""


def validate(base: ServeSettings | str, profile: Profile, matrix: list[Cell], runs: int,
             out_dir: Path, log=print, access: Access = Access()) -> list[CellVerdict]:
    """`base`: the settings each cell's server starts from, or the URL of a server
    running, which can only be judged at its own settings (other cells are skipped,
    and said so). The verdicts come in `matrix`'s order."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = [(settings, list(group))
              for settings, group in groupby(matrix, key=lambda cell: cell.settings)]
    if isinstance(base, str):
        for settings, _ in groups:
            if SETTINGS[settings]:
                log(f"skipped: {settings} (the server at {base} runs its own settings)")
        groups = [(settings, group) for settings, group in groups if not SETTINGS[settings]]
    traces: dict[Cell, list[TraceRequest] | None] = {}
    done: dict[Cell, list[Comparison]] = {}
    checked: dict[Cell, list[list[dict]]] = {}
    verdicts: dict[Cell, CellVerdict] = {}
    for i in range(1, runs + 1):
        for settings, group in groups:
            server = base if isinstance(base, str) else replace(base, **SETTINGS[settings])
            server_log = out_dir / (f"server-{settings}.log" if runs == 1
                                    else f"server-{settings}-run-{i}.log")
            with live_target(server, server_log, access) as target:
                max_model_len = target.info.scheduler["max_model_len"]
                before = price_check(target, max_model_len)
                for cell in group:
                    if cell not in traces:
                        traces[cell] = _trace(cell, max_model_len, log)
                    trace = traces[cell]
                    if trace is None:
                        continue
                    log(f"{cell.name}: live run {i} of {runs} ({len(trace)} requests)")
                    run_dir = out_dir / f"{cell.trace}--{cell.settings}" / f"run-{i}"
                    done.setdefault(cell, []).append(
                        compare(trace, profile, target.url, run_dir,
                                log=lambda *_: None, access=target.access))
                    after = price_check(target, max_model_len)
                    about = before + after
                    checked.setdefault(cell, []).append(about)
                    write_step_log(run_dir / PRICE_CHECK_LOG, about)
                    before = after
                    if i == runs:
                        verdicts[cell] = _verdict(cell, trace, profile, done[cell], checked[cell])
                        ok = verdicts[cell].ok
                        log(f"{cell.name}: " + ("no request served" if ok is None else
                                                "within bounds" if ok else "OVER a bound"))
    return [verdicts[cell] for cell in matrix if cell in verdicts]


def _trace(cell: Cell, max_model_len: int, log) -> list[TraceRequest] | None:
    try:
        return TRACES[cell.trace](max_model_len)
    except FileNotFoundError as exc:
        log(f"skipped: {cell.name}: no trace: {exc}")
        return None


def _verdict(cell: Cell, trace: list[TraceRequest], profile: Profile,
             comparisons: list[Comparison], checked: list[list[dict]]) -> CellVerdict:
    # every run's simulated side is the same: the same seeds
    settings = comparisons[0].server.sim_settings()
    sim, beyond = _simulated(trace, simulated_server(profile, settings))
    return _judged(cell, trace, profile, [c.live.summary.as_dict() for c in comparisons],
                   checked, [c.steps for c in comparisons], settings, sim, beyond)


def _simulated(trace: list[TraceRequest], setup: ReplaySetup) -> tuple[dict, list[str]]:
    """The median of `SIM_SEEDS` replays' `FIGURES` and `EXACT` counts (the first
    replay's summary for the rest), and where the replays went past the fit."""
    seeds = range(SIM_SEEDS if setup.step_scatter else 1)
    replays = [sim_replay(trace, replace(setup, scatter_seed=seed)) for seed in seeds]
    summaries = [r.summary.as_dict() for r in replays]
    median = dict(summaries[0])
    for name in FIGURES + EXACT:
        values = [s[name] for s in summaries]
        if None not in values:
            median[name] = statistics.median(values)
    return median, [b.describe() for b in replays[0].beyond_fitted]


def _judged(cell: Cell, trace: list[TraceRequest], profile: Profile, live: list[dict],
            checked: list[list[dict]], ran: list[list[dict]], sim_settings: dict, sim: dict,
            beyond_fit: list[str]) -> CellVerdict:
    """The cell's live runs (`live`, each run's summary) against the simulator at
    the profile's prices (`sim`, its summary), and at those prices times the host's
    pace: as the price checks about the runs read it (`checked`, each run's check
    steps; all of them together, one longer check), and as the runs' own steps
    (`ran`) ran (their median)."""
    cost = profile.cost_model()
    setup = simulated_server(profile, sim_settings)

    def repriced(paces: list[float | None], factor: float | None) -> Repricing:
        if factor is None:
            return paces, None, None
        scaled = replace(setup, cost=ScaledCost(setup.cost, factor))
        return paces, factor, _simulated(trace, scaled)[0]

    def run_pace(steps: list[dict]) -> float | None:
        return pace(steps, cost) if steps else None

    paces = [run_pace(steps) for steps in ran]
    known = [p for p in paces if p is not None]
    return cell_verdict(cell.trace, cell.settings, live, sim, sum(r.client.leaves for r in trace),
                        beyond_fit, sim_settings,
                        repriced([run_pace(steps) for steps in checked],
                                 run_pace([step for steps in checked for step in steps])),
                        repriced(paces, statistics.median(known) if known else None))


def rejudge(recorded: Path, profile: Profile) -> list[CellVerdict]:
    """The cells of a `validate.json` judged again with `profile`: the same live
    runs, each trace simulated anew at the settings its live server ran, each run's
    paces priced anew from its step log and its price checks' (None where the log
    is not beside it)."""
    recorded = Path(recorded)
    verdicts = []
    for cell in json.loads(recorded.read_text())["cells"]:
        settings = cell.get("sim_settings")
        if not settings:
            raise ValueError(f"{recorded}: cell {cell['trace']} × {cell['settings']} does not "
                             f"keep the settings it ran (written by an older validate)")
        folder = recorded.parent / f"{cell['trace']}--{cell['settings']}"
        runs = [folder / f"run-{i}" for i in range(1, cell["runs"] + 1)]
        trace = TRACES[cell["trace"]](settings["max_model_len"])
        sim, beyond = _simulated(trace, simulated_server(profile, settings))
        verdicts.append(_judged(Cell(cell["trace"], cell["settings"]), trace, profile,
                                recorded_runs(cell),
                                [_logged_steps(run / PRICE_CHECK_LOG) for run in runs],
                                [_logged_steps(run / "live-steps.jsonl") for run in runs],
                                settings, sim, beyond))
    return verdicts


def _logged_steps(path: Path) -> list[dict]:
    """The steps logged at `path`; none where there is no log."""
    return load_step_log(path) if path.exists() else []
