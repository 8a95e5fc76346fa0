"""The summary of a replay, computed from its per-request outcomes by this one
function for the simulator, the live load generator and the sim-against-live
comparison alike, so that both sides of a comparison are measured the same way;
a replay too long to hold its outcomes adds each to a `Tally` as it ends.
What outcomes cannot know (the engine's own token count, the server's count of
tokens made after clients left, the engine's peaks) the caller passes in."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

from .outcome import COMPLETED, RequestOutcome
from .percentiles import Percentiles
from .slo import Slo

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
    slo_attainment: float | None = None
    """The share of requests judged by the SLO that met it (see `Slo`); None without one."""
    goodput_tok_s: float | None = None
    """Tokens read by the requests that met the SLO, per second of makespan."""

    def as_dict(self) -> dict:
        return asdict(self)


class Tally:
    """What a summary needs of the outcomes, taken one outcome at a time as the
    requests end: counts, sums, the first arrival and the last moment done, and
    each percentile's values (the pooled gaps too) in `Percentiles`, which keep
    them exactly in bounded memory. So a replay of any length is summarized
    without holding its outcomes, and to the same floats as from a list of them.
    Close it (or use it in a `with`) to remove the files of spilled values."""

    def __init__(self, slo: Slo | None = None) -> None:
        self.slo = slo
        self.judged = self.met = self.good_tokens = 0
        self.requests = self.completed = self.left = self.dropped = 0
        self.refusals: Counter[str] = Counter()
        """Requests refused before their stream began, by `Refusal` value."""
        self.tokens_generated = self.tokens_read = self.wasted_tokens = 0
        self.start = math.inf
        self.done = -math.inf
        self.ttft_client, self.ttft_engine, self.e2e = Percentiles(), Percentiles(), Percentiles()
        self.gaps = Percentiles()
        """Inter-token gaps as the clients received them, all streams pooled."""
        self.stalls = Percentiles()
        """Each stream's longest gap."""

    @classmethod
    def of(cls, outcomes: Iterable[RequestOutcome], slo: Slo | None = None) -> Tally:
        tally = cls(slo)
        for o in outcomes:
            tally.add(o)
        return tally

    def add(self, o: RequestOutcome) -> None:
        self.requests += 1
        if o.refused is not None:
            self.refusals[o.refused] += 1
        if o.left_s is not None:
            self.left += 1
        elif o.finish_reason in COMPLETED:
            self.completed += 1
            self.e2e.add(o.finish_s - o.arrival_s)
        if o.finish_reason == "slow_client":
            self.dropped += 1
        if o.first_token_client_s is not None:
            self.ttft_client.add(o.first_token_client_s - o.arrival_s)
        if o.first_token_engine_s is not None:
            self.ttft_engine.add(o.first_token_engine_s - o.arrival_s)
        self.tokens_generated += o.tokens_generated
        self.tokens_read += o.tokens_read
        self.wasted_tokens += o.tokens_after_leave
        self.start = min(self.start, o.arrival_s)
        self.done = max(self.done, _done_s(o))
        if len(o.token_times_s) > 1:
            gaps = np.diff(np.array(o.token_times_s, dtype=np.float64))
            self.gaps.extend(gaps)
            self.stalls.add(float(gaps.max()))
        if self.slo is not None and self.slo.judges(o):
            self.judged += 1
            if self.slo.met(o):
                self.met += 1
                self.good_tokens += o.tokens_read

    def summary(self, *, tokens_generated: int | None = None, wasted_tokens: int | None = None,
                peak_running: int | None = None, peak_waiting: int | None = None,
                peak_paused: int | None = None, peak_blocks_reserved: int | None = None,
                preemptions: int | None = None, recomputed_tokens: int | None = None) -> Summary:
        """The summary of the outcomes added (see `summarize`)."""
        for name, value in (("tokens_generated", tokens_generated),
                            ("wasted_tokens", wasted_tokens)):
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        start = self.start if self.requests else 0.0
        makespan = self.done - start if self.requests else 0.0
        if tokens_generated is None:
            tokens_generated = self.tokens_generated
        if wasted_tokens is None:
            wasted_tokens = self.wasted_tokens
        t50, t90, t99 = self.ttft_client.percentiles((50, 90, 99))
        e50, e90, e99 = self.ttft_engine.percentiles((50, 90, 99))
        g50, g99 = self.gaps.percentiles((50, 99))
        s50, s99 = self.stalls.percentiles((50, 99))
        d50, d90, d99 = self.e2e.percentiles((50, 90, 99))
        return Summary(
            requests=self.requests, completed=self.completed,
            refused=sum(self.refusals.values()), left=self.left, dropped=self.dropped,
            ttft_client_p50_s=t50, ttft_client_p90_s=t90, ttft_client_p99_s=t99,
            ttft_engine_p50_s=e50, ttft_engine_p90_s=e90, ttft_engine_p99_s=e99,
            gap_p50_s=g50, gap_p99_s=g99, stall_p50_s=s50, stall_p99_s=s99,
            e2e_p50_s=d50, e2e_p90_s=d90, e2e_p99_s=d99,
            tokens_generated=tokens_generated, tokens_read=self.tokens_read,
            wasted_tokens=wasted_tokens, makespan_s=makespan,
            throughput_tok_s=tokens_generated / makespan if makespan > 0 else None,
            peak_running=peak_running, peak_waiting=peak_waiting, peak_paused=peak_paused,
            peak_blocks_reserved=peak_blocks_reserved, preemptions=preemptions,
            recomputed_tokens=recomputed_tokens,
            slo_attainment=self.met / self.judged if self.judged else None,
            goodput_tok_s=(self.good_tokens / makespan if self.slo is not None and makespan > 0
                           else None))

    def close(self) -> None:
        for values in (self.ttft_client, self.ttft_engine, self.e2e, self.gaps, self.stalls):
            values.close()

    def __enter__(self) -> Tally:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def summarize(outcomes: Iterable[RequestOutcome], slo: Slo | None = None, **engine) -> Summary:
    """The summary of `outcomes`.

    The makespan runs from the first arrival to the last moment any client was done
    with its request: it read the final event, left, or was answered with a
    refusal. It is measured on the clients' side only, because that is the clock
    both a live replay and a simulated one keep in the same way; where the engine
    stopped (a step or two after a leaver, say) would measure the simulated engine
    against a live log taken differently, and the load generator has no such log.

    `engine`, each None by default (see `Tally.summary`): `tokens_generated`, the
    engine's count, when the caller has one; else the outcomes' own, which a live
    client knows only up to the moment it left. `wasted_tokens`: the server's count
    of tokens made after their client left; else the outcomes' own (the simulator's
    clients know it, live ones do not). Throughput is `tokens_generated` over the
    makespan. `peak_running`, `peak_waiting`, `peak_paused`, `peak_blocks_reserved`
    come from the engine's time series, `preemptions` and `recomputed_tokens` from
    its counts. With an `slo`, the attainment and goodput."""
    with Tally.of(outcomes, slo) as tally:
        return tally.summary(**engine)


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
