"""The comparison as a table: each figure of the two summaries live, simulated,
and the relative error, with the bound it is held to; written as markdown and
JSON, printed as text."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .compare import Comparison

BOUNDS = {"ttft_client_p50_s": 0.10, "ttft_client_p99_s": 0.20, "throughput_tok_s": 0.05,
          "makespan_s": 0.05}
"""Relative error a calibrated simulator should stay within."""
ROWS = ("ttft_client_p50_s", "ttft_client_p90_s", "ttft_client_p99_s", "ttft_engine_p50_s",
        "gap_p50_s", "gap_p99_s", "stall_p50_s", "stall_p99_s", "e2e_p50_s", "e2e_p99_s",
        "throughput_tok_s", "makespan_s", "wasted_tokens", "peak_running", "peak_waiting",
        "peak_paused", "peak_blocks_reserved", "tokens_generated", "completed", "left",
        "refused", "dropped", "preemptions", "recomputed_tokens")
"""The fields of `Summary` the table shows, in its order."""
SLO_ROWS = ("slo_attainment", "goodput_tok_s")
"""Shown after them when the server has an SLO."""


@dataclass(frozen=True)
class Row:
    name: str
    live: float | None
    sim: float | None
    """None where a side has nothing to measure it on (no completed request, say)."""
    error: float | None
    """(sim - live) / live; for wasted tokens, the absolute difference; None when
    live is 0 and sim is not, or either is None."""
    bound: float | None
    ok: bool | None


def rows(c: Comparison) -> list[Row]:
    live, sim = c.live.summary.as_dict(), c.sim.summary.as_dict()
    out = []
    judged = live["slo_attainment"] is not None or sim["slo_attainment"] is not None
    for name in ROWS + (SLO_ROWS if judged else ()):
        a, b = live[name], sim[name]
        if name == "wasted_tokens":
            # one step's worth per leaving stream: a token each
            error, bound = float(b - a), float(c.leavers)
            ok = abs(error) <= bound
        else:
            if a is None or b is None:
                error = None
            else:
                error = (b - a) / a if a else (0.0 if b == a else None)
            bound = BOUNDS.get(name)
            ok = None if bound is None else error is not None and abs(error) <= bound
        out.append(Row(name, a, b, error, bound, ok))
    return out


def text_table(table: list[Row]) -> str:
    lines = [f"{'figure':<18} {'live':>10} {'sim':>10} {'error':>8} {'bound':>7}"]
    for r in table:
        err, bound = _cells(r)
        mark = {True: " ok", False: " OVER", None: ""}[r.ok]
        lines.append(f"{r.name:<18} {_num(r.live):>10} {_num(r.sim):>10} {err:>8} {bound:>7}{mark}")
    return "\n".join(lines)


def write_report(c: Comparison, table: list[Row], out_dir: Path, header: str, plots: list[str]) -> Path:
    (out_dir / "figures.json").write_text(json.dumps(
        {r.name: {"live": r.live, "sim": r.sim, "error": r.error, "bound": r.bound, "ok": r.ok}
         for r in table}, indent=2) + "\n")
    md = [f"# Live against simulated\n\n{header}\n", "| figure | live | sim | error | bound |",
          "|---|---:|---:|---:|---:|"]
    for r in table:
        err, bound = _cells(r)
        md.append(f"| {r.name} | {_num(r.live)} | {_num(r.sim)} | {err} | {bound} |")
    md += [""] + [f"![{p}]({p})" for p in plots]
    path = out_dir / "report.md"
    path.write_text("\n".join(md) + "\n")
    return path


def _cells(r: Row) -> tuple[str, str]:
    """The error and its bound as printed: tokens for wasted tokens, else percent."""
    if r.name == "wasted_tokens":
        return f"{r.error:+.0f}", f"±{r.bound:.0f}"
    error = "-" if r.error is None else f"{r.error:+.1%}"
    return error, "" if r.bound is None else f"±{r.bound:.0%}"


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    return f"{v:.4g}"
