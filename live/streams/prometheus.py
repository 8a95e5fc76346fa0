"""Prometheus metrics of one server, in a registry of its own (so that two apps
in one process, as in tests, never share counts)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from scheduler import CoreSnapshot, FinishReason, KeyHolding
from traces.slo import Slo

from .events import COMPLETED
from .loop_histogram import LoopHistogram

# from a fast local step (1 ms) to a long queue (a minute)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    def __init__(self, key_names: list[str] = (), slo: Slo | None = None):
        """`key_names`: the client keys, whose series are labelled by name (each
        shown from the start, at zero). `slo`: what requests are judged by, as the
        server sees them (from arrival to each token reaching the hub)."""
        self.registry = r = CollectorRegistry()
        self.slo = slo
        self.ttft = Histogram("twinstep_time_to_first_token_seconds",
                              "From arrival to the first token reaching the hub",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.inter_token = LoopHistogram("twinstep_inter_token_seconds",
                                         "Between consecutive tokens of a stream",
                                         LATENCY_BUCKETS, r)
        self.queue_time = Histogram("twinstep_queue_time_seconds",
                                    "From arrival to the start of the step that admitted it",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.e2e = Histogram("twinstep_e2e_request_seconds",
                             "From arrival to the end of a request that completed",
                             buckets=E2E_BUCKETS, registry=r)
        self.running = Gauge("twinstep_requests_running", "Sequences in the batch", registry=r)
        self.waiting = Gauge("twinstep_requests_waiting", "Requests waiting for a slot", registry=r)
        self.paused = Gauge("twinstep_requests_paused", "Sequences left out of the batch",
                            registry=r)
        self.kv_usage = Gauge("twinstep_kv_cache_usage_ratio",
                              "Reserved KV blocks over all blocks", registry=r)
        self.finished_total = Counter("twinstep_requests_finished",
                                      "Streams ended, by finish reason", ["reason"], registry=r)
        self.refused_total = Counter("twinstep_requests_refused",
                                     "Requests refused before the first byte, by status",
                                     ["status"], registry=r)
        self.wasted_tokens = Counter("twinstep_wasted_tokens",
                                     "Tokens generated after their client left", registry=r)
        self.preemptions = Counter("twinstep_preemptions",
                                   "Sequences preempted for KV blocks (optimistic admission)",
                                   registry=r)
        self.recomputed_tokens = Counter("twinstep_recomputed_tokens",
                                         "Tokens prefilled again for preempted sequences",
                                         registry=r)
        self.key_streams = Gauge("twinstep_key_streams", "Streams a client key holds, waiting "
                                 "or running", ["key"], registry=r)
        self.key_waiting = Gauge("twinstep_key_waiting", "Requests of a client key waiting "
                                 "for admission", ["key"], registry=r)
        self.key_refused_total = Counter("twinstep_key_refused", "Requests refused at a client "
                                         "key's limit, by the limit", ["key", "limit"], registry=r)
        if slo is not None:
            self.slo_judged = Counter("twinstep_slo_judged", "Requests judged by the SLO: all "
                                      "but those whose client left and those refused as "
                                      "invalid", registry=r)
            self.slo_met = Counter("twinstep_slo_met", "Requests that ran to their end within "
                                   "the SLO's TTFT and TPOT", registry=r)
            self.slo_goodput_tokens = Counter("twinstep_slo_goodput_tokens", "Tokens of the "
                                              "requests that met the SLO", registry=r)
        self.key_names = list(key_names)
        for name in self.key_names:
            self.key_streams.labels(name)
            self.key_waiting.labels(name)
        self._carried = (0, 0)
        """The core's counts the two counters above have taken."""
        for reason in FinishReason:
            self.finished_total.labels(reason.value)

    def first_token(self, ttft_s: float, queue_s: float) -> None:
        self.ttft.observe(ttft_s)
        self.queue_time.observe(queue_s)

    def token_gap(self, seconds: float) -> None:
        self.inter_token.observe(seconds)

    def finished(self, reason: FinishReason, e2e_s: float | None) -> None:
        self.finished_total.labels(reason.value).inc()
        if e2e_s is not None:
            self.e2e.observe(e2e_s)

    def refused(self, status: int) -> None:
        self.refused_total.labels(str(status)).inc()
        if self.slo is not None and (status == 429 or status >= 500):
            self.slo_judged.inc()  # turned away for load, or failed: a miss

    def judge(self, reason: FinishReason, arrival: float, first_token: float | None,
              last_token: float | None, tokens: int) -> None:
        """A stream that ended, by the SLO; one cancelled (its client left, or it
        was never read) is not judged."""
        if self.slo is None or reason is FinishReason.CANCELLED:
            return
        self.slo_judged.inc()
        if reason not in COMPLETED:
            return
        ttft = None if first_token is None else first_token - arrival
        tpot = (last_token - first_token) / (tokens - 1) if tokens > 1 else None
        if self.slo.within(ttft, tpot):
            self.slo_met.inc()
            self.slo_goodput_tokens.inc(tokens)

    def key_refused(self, key: str, limit: str) -> None:
        self.key_refused_total.labels(key, limit).inc()

    def wasted_token(self) -> None:
        self.wasted_tokens.inc()

    @property
    def tokens_after_leave(self) -> int:
        """The wasted tokens counted so far: the one total, which `/stats` reports too."""
        (family,) = self.wasted_tokens.collect()
        return int(next(s.value for s in family.samples if s.name.endswith("_total")))

    def exposition(self, summary: CoreSnapshot, num_blocks: int,
                   holding: dict[str, KeyHolding]) -> bytes:
        """The text format, with the gauges read from the latest step summary and
        what each key holds now, and the core's own counts carried into their
        counters."""
        for name in self.key_names:
            held = holding.get(name, KeyHolding())
            self.key_streams.labels(name).set(held.streams)
            self.key_waiting.labels(name).set(held.waiting)
        self.preemptions.inc(summary.preemptions - self._carried[0])
        self.recomputed_tokens.inc(summary.recomputed_tokens - self._carried[1])
        self._carried = (summary.preemptions, summary.recomputed_tokens)
        self.running.set(summary.running)
        self.waiting.set(summary.waiting)
        self.paused.set(summary.paused)
        self.kv_usage.set(summary.blocks_reserved / num_blocks)
        return generate_latest(self.registry)
