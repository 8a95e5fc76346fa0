"""The summary of a replay with what only the engine knows: its own count of the
tokens it made and its peaks, taken from its time series. The live side's series,
read back from its step log, goes through the same function. Beside it, the
refusals by reason: a what-if on limits asks which limit refused what, and
what to change when they turned most of the trace away."""
from __future__ import annotations

from collections import Counter

from scheduler import FinishReason
from traces.outcome import Refusal
from traces.summary import Summary, Tally

from .timeseries import TimeSeries


def summarize_replay(tally: Tally, series: TimeSeries, *, preemptions: int,
                     recomputed_tokens: int) -> Summary:
    """The outcomes tallied, with the engine's series and counts."""
    return tally.summary(tokens_generated=series.tokens_made(),
                         peak_running=series.peak("running"), peak_waiting=series.peak("waiting"),
                         peak_paused=series.peak("paused"),
                         peak_blocks_reserved=series.peak("blocks_reserved"),
                         preemptions=preemptions, recomputed_tokens=recomputed_tokens)


def refusals_by_reason(counts: Counter[str]) -> dict[str, int]:
    """How many requests each `Refusal` turned away (counts by value, as
    `Tally.refusals`), in the enum's order; reasons that refused none are left out."""
    return {reason.value: counts[reason.value] for reason in Refusal if counts[reason.value]}


def format_refusals(counts: dict[str, int]) -> str:
    """One line a reason, in the columns of `format_summary`."""
    return "\n".join(f"{'refused ' + reason:<22} {n:>14}" for reason, n in counts.items())


ADVICE = {
    Refusal.QUEUE_FULL.value: "the server is overloaded for this trace: a profile of faster "
    "hardware, a larger --max-batch/--num-blocks, or a larger --max-waiting",
    Refusal.TOO_LARGE.value: "requests longer than the context or the pool: a larger "
    "--num-blocks or a model with a longer context",
    Refusal.KEY_LIMIT.value: "per-key limits refuse it: raise "
    "--max-streams-per-key/--max-waiting-per-key",
    FinishReason.SLOW_CLIENT.value: "streams dropped for slow readers: --stall-timeout-s "
    "or --policy",
}
"""What to change when a reason turns most of a trace away."""


def refusal_advice(summary: Summary, refusals: dict[str, int]) -> str | None:
    """One line when more than half of the requests were refused or dropped as slow
    clients (whose numbers would then describe the few served): the main reason and
    what to change. None otherwise."""
    turned_away = summary.refused + summary.dropped
    if 2 * turned_away <= summary.requests:
        return None
    reasons = {**refusals, FinishReason.SLOW_CLIENT.value: summary.dropped}
    reason = max(reasons, key=reasons.__getitem__)
    line = (f"{turned_away} of {summary.requests} requests were refused or dropped, "
            f"{reasons[reason]} of them {reason}")
    return f"{line}: {ADVICE[reason]}" if reason in ADVICE else line
