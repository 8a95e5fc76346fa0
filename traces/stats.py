"""A trace at a glance: how many requests, over how long, how long their prompts
and outputs are, and how many of their clients read slowly or leave."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .record import TraceRequest


@dataclass(frozen=True, slots=True)
class LengthStats:
    mean: float
    p50: float
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, lengths: list[int]) -> LengthStats:
        a = np.asarray(lengths, dtype=np.float64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(float(a.mean()), float(p50), float(p90), float(p99), int(a.max()))


@dataclass(frozen=True, slots=True)
class TraceStats:
    count: int
    duration_s: float
    """From the first arrival to the last."""
    mean_rate_per_s: float | None
    """Gaps per second between the first and last arrival: the rate a generator was
    asked for. None when there are fewer than two distinct arrival times."""
    prompt: LengthStats | None
    output: LengthStats | None
    slow_fraction: float
    leave_fraction: float


def trace_stats(requests: list[TraceRequest]) -> TraceStats:
    if not requests:
        return TraceStats(0, 0.0, None, None, None, 0.0, 0.0)
    arrivals = [r.arrival_s for r in requests]
    duration = max(arrivals) - min(arrivals)
    n = len(requests)
    return TraceStats(
        count=n,
        duration_s=duration,
        mean_rate_per_s=(n - 1) / duration if duration > 0 else None,
        prompt=LengthStats.of([r.prompt_tokens for r in requests]),
        output=LengthStats.of([r.max_new_tokens for r in requests]),
        slow_fraction=sum(r.client.slow for r in requests) / n,
        leave_fraction=sum(r.client.leaves for r in requests) / n,
    )


def format_stats(s: TraceStats) -> str:
    rate = "-" if s.mean_rate_per_s is None else f"{s.mean_rate_per_s:.3f}"
    lines = [
        f"{'requests':<16}{s.count}",
        f"{'duration_s':<16}{s.duration_s:.3f}",
        f"{'mean_rate_per_s':<16}{rate}",
        f"{'slow_fraction':<16}{s.slow_fraction:.3f}",
        f"{'leave_fraction':<16}{s.leave_fraction:.3f}",
    ]
    if s.prompt and s.output:
        lines += ["", f"{'tokens':<8}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}"]
        for name, d in (("prompt", s.prompt), ("output", s.output)):
            lines.append(f"{name:<8}{d.mean:>10.1f}{d.p50:>10.1f}{d.p90:>10.1f}{d.p99:>10.1f}{d.max:>10}")
    return "\n".join(lines)
