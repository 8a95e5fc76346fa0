"""Replay one trace under every combination of some settings."""
from __future__ import annotations

import itertools

from traces.record import TraceRequest

from .cost_model import CostModel
from .metrics import Summary
from .replay import replay
from .settings import build_setup

ROW_METRICS = ("completed", "refused", "dropped", "ttft_client_p50_s", "ttft_client_p99_s",
               "gap_p99_s", "e2e_p50_s", "throughput_tok_s", "makespan_s", "wasted_tokens",
               "peak_waiting", "peak_blocks_reserved")
"""The columns of a sweep's table besides the varied settings."""


def parse_param(text: str) -> tuple[str, list]:
    """`name=v1,v2,...`; each value is read as an int, else a float, else a string."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise ValueError(f"a sweep parameter is name=v1,v2,...; got {text!r}")
    return name.strip(), [_value(v.strip()) for v in values.split(",")]


def sweep(trace: list[TraceRequest], cost: CostModel, base: dict,
          grid: dict[str, list]) -> list[tuple[dict, Summary]]:
    """One replay per combination of `grid`'s values over the `base` settings (the
    names `build_setup` takes); returns each combination with its summary."""
    rows = []
    for values in itertools.product(*grid.values()):
        varied = dict(zip(grid, values))
        rows.append((varied, replay(trace, build_setup(cost, **{**base, **varied})).summary))
    return rows


def format_sweep(rows: list[tuple[dict, Summary]]) -> str:
    if not rows:
        return ""
    names = list(rows[0][0]) + list(ROW_METRICS)
    table = [names]
    for varied, summary in rows:
        metrics = summary.as_dict()
        table.append([_shown(v) for v in varied.values()] + [_shown(metrics[m]) for m in ROW_METRICS])
    widths = [max(len(row[i]) for row in table) for i in range(len(names))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table)


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _shown(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
