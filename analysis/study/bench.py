"""What every study shares: one live server at a time, started with the user's
serve settings and the study's own on top; the profile `make run` uses for the
simulator's step costs; the comparison of one trace on both sides; and the
findings written as `study.md`, `study.png` and `study.json`."""
from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt  # noqa: E402

from scheduler.settings import ServeSettings  # noqa: E402
from sim import Profile  # noqa: E402
from sim.replay import Probe  # noqa: E402
from traces import TraceRequest  # noqa: E402
from traces.percentiles import Percentiles  # noqa: E402

from ..compare import Comparison, compare  # noqa: E402
from ..live_target import LiveTarget, live_target  # noqa: E402

NOT_MODELLED = "not modelled"
"""The simulator's cell for a quantity it has no model of."""


class Skipped(RuntimeError):
    """A study that cannot run on this machine (a program it needs is missing): it
    is reported and skipped, which is no failure."""


@dataclass(frozen=True)
class Quantity:
    """One measured quantity: live, simulated (a number, None when there was
    nothing to measure, or `NOT_MODELLED`), and the reference figure for orientation."""

    name: str
    live: float | None
    sim: float | str | None
    reference: str = ""

    @property
    def error(self) -> float | None:
        """(sim - live) / live, where both are numbers and live is not 0."""
        if not isinstance(self.sim, (int, float)) or self.live is None or not self.live:
            return None
        return (self.sim - self.live) / self.live


@dataclass
class Findings:
    title: str
    setup: str
    """What was run, at what scale."""
    quantities: list[Quantity]
    draw: Callable[[plt.Figure], None]
    """Draws the study's figure."""
    notes: list[str] = field(default_factory=list)


@dataclass
class Bench:
    """What a study is given: the user's serve settings (model, device, dtype,
    threads, ...), the profile of their hardware, where its files go."""

    settings: ServeSettings
    profile: Profile
    out_dir: Path
    log: Callable[..., None] = print

    @contextlib.contextmanager
    def server(self, name: str, **overrides) -> Iterator[LiveTarget]:
        """A live server with the study's `overrides` of the user's settings."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        settings = replace(self.settings, **overrides)
        self.log(f"{name}: starting a server ({_shown(overrides)})")
        with live_target(settings, self.out_dir / f"{name}-server.log") as target:
            yield target

    def compare(self, target: LiveTarget, name: str, trace: list[TraceRequest],
                probe: Probe | None = None, recv_buffer_bytes: int | None = None) -> Comparison:
        """`trace` replayed against `target` and in the simulator with the same settings."""
        return compare(trace, self.profile, target.url, self.out_dir / name,
                       log=lambda *a: self.log(f"{name}:", *a), access=target.access,
                       probe=probe, recv_buffer_bytes=recv_buffer_bytes)


def _shown(overrides: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "as given"


def write_study(name: str, findings: Findings, out_dir: Path, runtime_s: float) -> Path:
    """`study.md` (the table, the notes, the figure), `study.png` and `study.json`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = plt.figure(figsize=(10, 4.5), dpi=110)
    findings.draw(fig)
    fig.tight_layout()
    fig.savefig(out_dir / "study.png")
    plt.close(fig)
    (out_dir / "study.json").write_text(json.dumps({
        "study": name, "title": findings.title, "setup": findings.setup,
        "runtime_s": round(runtime_s, 1), "notes": findings.notes,
        "quantities": {q.name: {**asdict(q), "error": q.error} for q in findings.quantities},
    }, indent=2) + "\n")
    md = [f"# {findings.title}\n", findings.setup + "\n", markdown_table(findings.quantities), ""]
    md += [f"* {note}" for note in findings.notes]
    md += ["", f"Ran in {runtime_s:.0f} s.", "", "![study](study.png)", ""]
    path = out_dir / "study.md"
    path.write_text("\n".join(md))
    return path


def markdown_table(quantities: list[Quantity]) -> str:
    lines = ["| quantity | live | simulated | error | reference |", "|---|---:|---:|---:|---|"]
    for q in quantities:
        error = "-" if q.error is None else f"{q.error:+.0%}"
        lines.append(f"| {q.name} | {number(q.live)} | {number(q.sim)} | {error} | "
                     f"{q.reference} |")
    return "\n".join(lines)


def number(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def cdf(ax, values: list[float], **style) -> None:
    """The empirical distribution of `values` as a step line on `ax`."""
    ordered = sorted(values)
    ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", **style)


def percentile(values: list[float], q: float) -> float | None:
    """The `q`th percentile as every summary takes it (`traces.percentiles`, numpy's
    linear method); None of nothing."""
    with Percentiles() as pooled:
        for value in values:
            pooled.add(value)
        return pooled.percentiles([q])[0]
