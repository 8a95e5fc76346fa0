"""Replay one trace under every combination of some settings: one after another,
on local processes, or as the tasks of a Ray cluster. Rows come back in grid
order, whatever order the replays finish in."""
from __future__ import annotations

import csv
import itertools
import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from traces.record import TraceRequest
from traces.shaping import shape
from traces.summary import Summary

from .cost_model import CostModel
from .fitted_ranges import Beyond, FittedRanges
from .replay import replay
from .settings import SETTINGS, ReplaySetup, build_setup

ROW_METRICS = ("completed", "refused", "dropped", "ttft_client_p50_s", "ttft_client_p99_s",
               "gap_p99_s", "stall_p99_s", "e2e_p50_s", "throughput_tok_s", "makespan_s",
               "wasted_tokens", "peak_waiting", "peak_blocks_reserved")
"""The columns of a sweep's table besides the varied settings."""

SLO_METRICS = ("slo_attainment", "goodput_tok_s")
"""Columns of a sweep with an SLO."""

TRACE_SETTINGS = ("rate_scale",)
"""Settings that change the trace rather than the server: rate_scale 2 makes the
arrivals twice as fast."""

Row = tuple[dict, Summary, tuple[Beyond, ...]]
"""The varied settings of one combination, its replay's summary, and the features
it took past the ranges the cost model was fitted on."""

Outcome = tuple[Summary, tuple[Beyond, ...]]
"""What one replay of a sweep brings back."""


@dataclass(frozen=True)
class Case:
    """One combination of the grid, ready to replay."""

    varied: dict
    setup: ReplaySetup
    rate_scale: float = 1.0


def parse_param(text: str) -> tuple[str, list]:
    """`name=v1,v2,...`; each value is read as a bool (`true`, `false`), else an
    int, else a float, else a string."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise ValueError(f"a sweep parameter is name=v1,v2,...; got {text!r}")
    return name.strip(), [_value(v.strip()) for v in values.split(",")]


def cases(cost: CostModel, base: dict, grid: dict[str, list],
          fitted: FittedRanges | None = None) -> list[Case]:
    """Every combination of `grid`'s values over the `base` settings (the names
    `build_setup` takes, and TRACE_SETTINGS), in grid order, each watched against
    the ranges `fitted`. All are built, and so checked, before any replay starts."""
    unknown = set(grid) - set(SETTINGS) - set(TRACE_SETTINGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; known: "
                         f"{', '.join(SETTINGS + TRACE_SETTINGS)}")
    combos = []
    for values in itertools.product(*grid.values()):
        varied = dict(zip(grid, values))
        settings = {**base, **varied}
        rate_scale = settings.pop("rate_scale", 1.0)
        if isinstance(rate_scale, str) or not rate_scale > 0:
            raise ValueError(f"rate_scale must be a positive number, got {rate_scale!r}")
        combos.append(Case(varied, build_setup(cost, fitted=fitted, **settings),
                           float(rate_scale)))
    return combos


def sweep(trace: list[TraceRequest], cost: CostModel, base: dict, grid: dict[str, list], *,
          fitted: FittedRanges | None = None, jobs: int = 1, ray_address: str | None = None,
          on_done: Callable[[], None] | None = None) -> list[Row]:
    """One replay per combination (see `cases`), on `jobs` local processes, or on
    the Ray cluster at `ray_address` ("local" starts one on this machine).
    `on_done` is called as each replay finishes."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    todo = cases(cost, base, grid, fitted)
    done = on_done or (lambda: None)
    if ray_address is not None:
        outcomes = _on_ray(ray_address, trace, todo, done)
    elif jobs > 1 and len(todo) > 1:
        outcomes = _on_processes(min(jobs, len(todo)), trace, todo, done)
    else:
        outcomes = []
        for case in todo:
            outcomes.append(run_case(trace, case))
            done()
    return [(case.varied, *outcome) for case, outcome in zip(todo, outcomes)]


def run_case(trace: list[TraceRequest], case: Case) -> Outcome:
    result = replay(scale_rate(trace, case.rate_scale), case.setup)
    return result.summary, tuple(result.beyond_fitted)


def scale_rate(trace: list[TraceRequest], rate_scale: float) -> list[TraceRequest]:
    return trace if rate_scale == 1 else shape(trace, time_scale=1 / rate_scale)


def _on_processes(jobs: int, trace: list[TraceRequest], todo: list[Case],
                  done: Callable[[], None]) -> list[Outcome]:
    # Each worker gets the trace once, when it starts, not with every case.
    with ProcessPoolExecutor(jobs, initializer=_keep_trace, initargs=(trace,)) as pool:
        futures = [pool.submit(_run_kept, case) for case in todo]
        for _ in as_completed(futures):
            done()
        return [f.result() for f in futures]


_kept_trace: list[TraceRequest] = []
"""The trace, in a worker process of `_on_processes`."""


def _keep_trace(trace: list[TraceRequest]) -> None:
    global _kept_trace
    _kept_trace = trace


def _run_kept(case: Case) -> Outcome:
    return run_case(_kept_trace, case)


def _on_ray(address: str, trace: list[TraceRequest], todo: list[Case],
            done: Callable[[], None]) -> list[Outcome]:
    """The cluster's workers must be able to import this package (as they can on
    this machine); the trace goes to the object store once."""
    try:
        import ray
    except ImportError:
        raise ImportError("a sweep on Ray needs the ray package: "
                          "pip install 'twinstep[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        if address == "local":
            ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        else:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        replay_on_ray = ray.remote(run_case)
        trace_ref = ray.put(trace)
        refs = [replay_on_ray.remote(trace_ref, case) for case in todo]
        pending = list(refs)
        while pending:
            _, pending = ray.wait(pending, num_returns=1)
            done()
        return ray.get(refs)
    finally:
        if started_here:
            ray.shutdown()


def format_sweep(rows: list[Row]) -> str:
    if not rows:
        return ""
    judged = any(summary.slo_attainment is not None for _, summary, _ in rows)
    shown = ROW_METRICS + (SLO_METRICS if judged else ())
    past = any(beyond for _, _, beyond in rows)  # a column only when some row went past the fit
    names = list(rows[0][0]) + list(shown) + ["beyond_fit"] * past
    table = [names]
    for varied, summary, beyond in rows:
        metrics = summary.as_dict()
        table.append([_shown(v) for v in varied.values()] + [_shown(metrics[m]) for m in shown]
                     + [_beyond(beyond)] * past)
    widths = [max(len(row[i]) for row in table) for i in range(len(names))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table)


def write_sweep(out: Path, rows: list[Row], about: dict) -> list[Path]:
    """`sweep.csv` (one row per combination: the varied settings, every summary
    figure, and the features beyond the fit) and `sweep.json` (`about`, e.g. the
    trace and the base settings, and the same rows)."""
    out.mkdir(parents=True, exist_ok=True)
    flat = [{**varied, **summary.as_dict(), "beyond_fit": _beyond(beyond) if beyond else None}
            for varied, summary, beyond in rows]
    csv_path, json_path = out / "sweep.csv", out / "sweep.json"
    with open(csv_path, "w", newline="") as f:
        if flat:
            writer = csv.DictWriter(f, fieldnames=list(flat[0]))
            writer.writeheader()
            writer.writerows(flat)
    json_path.write_text(json.dumps({**about, "rows": flat}, indent=2) + "\n")
    return [csv_path, json_path]


def _value(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _beyond(beyond: tuple[Beyond, ...]) -> str:
    """`decode_batch:2.0x` (reached over fitted) for each feature past the fit; `-`
    for none."""
    return ",".join(f"{b.feature}:{b.reached / b.fitted:.1f}x" if b.fitted else b.feature
                    for b in beyond) or "-"


def _shown(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
