"""The summary of a replay, computed from its per-request outcomes by this one
function for the simulator, the live load generator and the sim-against-live
comparison alike, so that both sides of a comparison are measured the same way.
What outcomes cannot know (the engine's own token count, the server's count of
tokens made after clients left, the engine's peaks) the caller passes in."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import chain

import numpy as np

from .outcome import RequestOutcome

COMPLETED = frozenset({"length", "stop", "eos"})
"""Finish reasons of a request that ran to its end."""


@dataclass(frozen=True)
class Summary:
    requests: int
    completed: int
    """Ran to its end with the client reading to the last event."""
    refused: int
    left: int
    """Clients that left before their stream ended."""
    dropped: int
    """Streams ended as `slow_client`."""
    ttft_client_p50_s: float | None
    ttft_client_p90_s: float | None
    ttft_client_p99_s: float | None
    ttft_engine_p50_s: float | None
    ttft_engine_p90_s: float | None
    ttft_engine_p99_s: float | None
    gap_p50_s: float | None
    """Inter-token gaps as the clients received them, all streams pooled."""
    gap_p99_s: float | None
    stall_p50_s: float | None
    """Each stream's longest gap between two tokens, over the streams: what pooled
    gaps hide when a rare long step (a long prompt's prefill) stalls every stream once."""
    stall_p99_s: float | None
    e2e_p50_s: float | None
    """Arrival to last event, completed requests only."""
    e2e_p90_s: float | None
    e2e_p99_s: float | None
    tokens_generated: int
    tokens_read: int
    wasted_tokens: int
    """Tokens made after their client had left."""
    makespan_s: float
    """First arrival to the last moment a client was done with its request."""
    throughput_tok_s: float | None
    """Tokens generated per second of makespan."""
    peak_running: int | None = None
    peak_waiting: int | None = None
    peak_paused: int | None = None
    peak_blocks_reserved: int | None = None
    preemptions: int | None = None
    """Sequences preempted for KV blocks (optimistic admission), from the engine."""
    recomputed_tokens: int | None = None
    """Tokens prefilled again for preempted sequences: work done twice."""

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(outcomes: list[RequestOutcome], *, tokens_generated: int | None = None,
              wasted_tokens: int | None = None, peak_running: int | None = None,
              peak_waiting: int | None = None, peak_paused: int | None = None,
              peak_blocks_reserved: int | None = None, preemptions: int | None = None,
              recomputed_tokens: int | None = None) -> Summary:
    """The summary of `outcomes`.

    The makespan runs from the first arrival to the last moment any client was done
    with its request: it read the final event, left, or was answered with a
    refusal. It is measured on the clients' side only, because that is the clock
    both a live replay and a simulated one keep in the same way; where the engine
    stopped (a step or two after a leaver, say) would measure the simulated engine
    against a live log taken differently, and the load generator has no such log.

    `tokens_generated`: the engine's count, when the caller has one; by default the
    outcomes' own, which a live client knows only up to the moment it left.
    `wasted_tokens`: the server's count of tokens made after their client left; by
    default the outcomes' own (the simulator's clients know it, live ones do not).
    Throughput is `tokens_generated` over the makespan. The peaks come from the
    engine's time series, and the preemptions from its counts; None without them."""
    for name, value in (("tokens_generated", tokens_generated), ("wasted_tokens", wasted_tokens)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    ttft_client = [o.ttft_client_s for o in outcomes if o.first_token_client_s is not None]
    ttft_engine = [o.ttft_engine_s for o in outcomes if o.first_token_engine_s is not None]
    completed = [o for o in outcomes if o.finish_reason in COMPLETED and o.left_s is None]
    start = min((o.arrival_s for o in outcomes), default=0.0)
    makespan = max((_done_s(o) for o in outcomes), default=start) - start
    if tokens_generated is None:
        tokens_generated = sum(o.tokens_generated for o in outcomes)
    if wasted_tokens is None:
        wasted_tokens = sum(o.tokens_after_leave for o in outcomes)
    t50, t90, t99 = _percentiles(ttft_client, (50, 90, 99))
    e50, e90, e99 = _percentiles(ttft_engine, (50, 90, 99))
    gaps, firsts = _gaps(outcomes)
    g50, g99 = _percentiles(gaps, (50, 99))
    s50, s99 = _percentiles(np.maximum.reduceat(gaps, firsts) if len(gaps) else gaps, (50, 99))
    d50, d90, d99 = _percentiles([o.finish_s - o.arrival_s for o in completed], (50, 90, 99))
    return Summary(
        requests=len(outcomes), completed=len(completed),
        refused=sum(o.refused is not None for o in outcomes),
        left=sum(o.left_s is not None for o in outcomes),
        dropped=sum(o.finish_reason == "slow_client" for o in outcomes),
        ttft_client_p50_s=t50, ttft_client_p90_s=t90, ttft_client_p99_s=t99,
        ttft_engine_p50_s=e50, ttft_engine_p90_s=e90, ttft_engine_p99_s=e99,
        gap_p50_s=g50, gap_p99_s=g99, stall_p50_s=s50, stall_p99_s=s99,
        e2e_p50_s=d50, e2e_p90_s=d90, e2e_p99_s=d99,
        tokens_generated=tokens_generated, tokens_read=sum(o.tokens_read for o in outcomes),
        wasted_tokens=wasted_tokens, makespan_s=makespan,
        throughput_tok_s=tokens_generated / makespan if makespan > 0 else None,
        peak_running=peak_running, peak_waiting=peak_waiting, peak_paused=peak_paused,
        peak_blocks_reserved=peak_blocks_reserved, preemptions=preemptions,
        recomputed_tokens=recomputed_tokens)


def format_summary(summary: Summary) -> str:
    """Two columns, one metric a line."""
    lines = []
    for name, value in summary.as_dict().items():
        if value is None:
            shown = "-"
        elif isinstance(value, float):
            shown = f"{value:.6g}"
        else:
            shown = str(value)
        lines.append(f"{name:<22} {shown:>14}")
    return "\n".join(lines)


def _done_s(o: RequestOutcome) -> float:
    """When the client was done with the request: the latest of its arrival, the
    answer's headers (a refusal's too), its final event and its leaving. A live
    client that leaves or is refused records no finish; a simulated one does."""
    return max(t for t in (o.arrival_s, o.headers_s, o.finish_s, o.left_s) if t is not None)


GAP_BATCH = 4096
"""Streams whose gaps are taken at once: a batch's token times are the only copy
made beside the pooled gaps, however many tokens a replay made."""


def _gaps(outcomes: list[RequestOutcome]) -> tuple[np.ndarray, np.ndarray]:
    """Every stream's inter-token gaps, pooled: the differences of each stream's
    token times, laid end to end; and where each stream's gaps begin among them."""
    streams = [o.token_times_s for o in outcomes if len(o.token_times_s) > 1]
    counts = np.array([len(times) - 1 for times in streams], dtype=np.int64)
    firsts = np.concatenate(([0], np.cumsum(counts)[:-1])) if streams else counts
    gaps = np.empty(int(counts.sum()))
    for start in range(0, len(streams), GAP_BATCH):
        batch = streams[start:start + GAP_BATCH]
        lengths = counts[start:start + GAP_BATCH] + 1
        times = np.fromiter(chain.from_iterable(batch), dtype=float, count=int(lengths.sum()))
        at = firsts[start] if len(firsts) else 0
        gaps[at:at + int(lengths.sum()) - len(batch)] = np.delete(
            np.diff(times), np.cumsum(lengths)[:-1] - 1)
    return gaps, firsts


def _percentiles(values, qs: tuple[int, ...]) -> list[float | None]:
    if len(values) == 0:
        return [None] * len(qs)
    return [float(v) for v in np.percentile(values, qs)]
