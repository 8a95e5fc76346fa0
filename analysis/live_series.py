"""The live engine's state over time, read back from its step records in the
simulator's `TimeSeries` form, on the replay's clock."""
from __future__ import annotations

from sim import TimeSeries


def series_from_steps(steps: list[dict], started_unix: float) -> TimeSeries:
    series = TimeSeries()
    for s in steps:
        series.record(s["start_unix"] + s["duration_s"] - started_unix, s["admitted"] - s["paused"],
                      s["waiting"], s["paused"], s["blocks_reserved"], s["tokens"])
    return series
