"""The summary of a replay with what only the engine knows: its own count of the
tokens it made and its peaks, taken from its time series. The live side's series,
read back from its step log, goes through the same function."""
from __future__ import annotations

from traces.outcome import RequestOutcome
from traces.summary import Summary, summarize

from .timeseries import TimeSeries


def summarize_replay(outcomes: list[RequestOutcome], series: TimeSeries, *,
                     preemptions: int, recomputed_tokens: int) -> Summary:
    """The outcomes with the engine's series and counts."""
    return summarize(outcomes, tokens_generated=sum(series.tokens),
                     peak_running=series.peak("running"), peak_waiting=series.peak("waiting"),
                     peak_paused=series.peak("paused"),
                     peak_blocks_reserved=series.peak("blocks_reserved"),
                     preemptions=preemptions, recomputed_tokens=recomputed_tokens)
