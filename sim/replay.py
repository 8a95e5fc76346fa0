"""Replay a trace against the simulated server and collect what happened."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

import simpy

from scheduler import Scheduler
from traces.outcome import RequestOutcome
from traces.record import TraceRequest
from traces.sessions import Sessions
from traces.summary import Summary, Tally

from .fitted_ranges import Beyond, RangeWatch
from .scatter import Scatter
from .serving.client import SimClient, check_reader
from .serving.engine import SimEngine
from .serving.hub import Hub
from .settings import ReplaySetup
from .summary import refusals_by_reason, summarize_replay
from .timeseries import TimeSeries


@dataclass
class Replay:
    outcomes: list[RequestOutcome]
    """In trace order; empty when they went to `replay`'s `records` instead."""
    series: TimeSeries
    summary: Summary
    steps: int
    """Plans the core made (steps and empty plans)."""
    events_discarded: int
    """Events made for streams the server had already closed."""
    wall_s: float
    refusals: dict[str, int]
    """Requests refused before their stream began, by `Refusal` value."""
    beyond_fitted: list[Beyond] = field(default_factory=list)
    """The features the replay took past the ranges its cost model was fitted on
    (none known without `ReplaySetup.fitted`)."""


class ReplayNotDrained(RuntimeError):
    """The replay ended with requests or blocks still held: a leak, or a stream
    that could never end."""


Probe = Callable[[simpy.Environment, Scheduler], Iterable]
"""A SimPy process body run beside the replay, e.g. to look at the core at given
times; it must end."""

Progress = Callable[[float, int], None]
"""Told now and then the simulated time and how many requests have finished
(refused, left, or read to their last event, and ended in the engine)."""

Records = Callable[[RequestOutcome], None]
"""Given each request's outcome once it is whole, in the order the requests end
(for example `OutcomeWriter.write`)."""

PROGRESS_TICKS = 200
"""Progress is told about this many times per trace span, fewer as a long drain
goes on: a few hundred wakes whatever the trace."""


def replay(trace: Iterable[TraceRequest], setup: ReplaySetup, probe: Probe | None = None,
           progress: Progress | None = None, *, records: Records | None = None,
           series: TimeSeries | None = None) -> Replay:
    """Replay `trace`: a list (its ids checked unique, replayed in arrival order),
    or any other iterable of requests in arrival order, read one request at a time
    as each arrives (a trace too long to hold; its ids must then be unique among
    the requests in flight). The outcomes are kept in memory unless `records` takes
    each as it is whole, and the engine's rows unless `series` (by default one in
    memory) is written or only tallied: then the replay holds only what is in
    flight, and its summary is the same to the bit."""
    started = time.perf_counter()
    if isinstance(trace, list):
        if len({r.id for r in trace}) != len(trace):
            raise ValueError("request ids in a trace must be unique")
        for r in trace:
            check_reader(r)
        arriving = Arrivals(sorted(trace, key=lambda r: r.arrival_s))
    else:
        arriving = Arrivals(trace)
    env = simpy.Environment()
    core = Scheduler(setup.config)
    series = TimeSeries() if series is None else series
    kept: list[RequestOutcome] = []
    in_flight: dict[str, SimClient] = {}
    with Tally(setup.slo) as tally:
        def settled(client: SimClient) -> None:
            del in_flight[client.request.id]
            tally.add(client.outcome)
            (kept.append if records is None else records)(client.outcome)

        cost = setup.cost if setup.fitted is None else RangeWatch(setup.cost, setup.fitted)
        scatter = Scatter(setup.step_scatter, setup.scatter_seed) if setup.step_scatter else None
        engine = SimEngine(env, core, cost, series, stops_early=setup.max_tokens_factor > 1,
                           scatter=scatter)
        hub = Hub(env, core, setup.policy, setup.overheads, setup.wire, engine.wake, settled,
                  resume_grace_s=setup.resume_grace_s, max_tokens_factor=setup.max_tokens_factor,
                  listens=setup.disconnect_notice == "listen")
        env.process(arriving.run(env, hub, setup, in_flight))
        env.process(engine.run(hub))
        if probe is not None:
            env.process(probe(env, core))
        if progress is not None and trace:
            env.process(_tell_progress(env, arriving, tally, progress))
        env.run()
        if not core.is_drained():
            raise ReplayNotDrained(f"the core is not drained after the replay: {core.snapshot()}")
        if in_flight:
            raise ReplayNotDrained(f"{len(in_flight)} requests never ended, e.g. "
                                   f"{list(in_flight)[:5]}")
        summary = summarize_replay(tally, series, preemptions=core.preemptions,
                                   recomputed_tokens=core.recomputed_tokens)
    if kept and isinstance(trace, list):
        position = {r.id: i for i, r in enumerate(trace)}
        kept.sort(key=lambda o: position[o.id])
    return Replay(kept, series, summary, core.snapshot().step, hub.events_discarded,
                  time.perf_counter() - started, refusals_by_reason(tally.refusals),
                  cost.beyond() if isinstance(cost, RangeWatch) else [])


class Arrivals:
    """The trace's requests in arrival order, each taken when it arrives, and sent
    (its client made) then, or, in a session, when its turn comes (`Sessions`)."""

    def __init__(self, requests: Iterable[TraceRequest]):
        self.requests = requests
        self.known = isinstance(requests, list)
        """Whether every arrival is known from the start."""
        self.latest = requests[-1].arrival_s if self.known and requests else 0.0
        """The last arrival known so far."""
        self.sessions = Sessions()

    def run(self, env: simpy.Environment, hub: Hub, setup: ReplaySetup,
            in_flight: dict[str, SimClient]):
        def send(request: TraceRequest, at: float) -> None:
            if request.id in in_flight:
                raise ValueError(f"request id {request.id!r} is already in flight")
            if at != request.arrival_s:  # its record says when it was sent
                request = replace(request, arrival_s=at)
            client = in_flight[request.id] = SimClient(env, request, hub,
                                                       None if request.session is None else done)
            env.process(client.run())

        def send_at(request: TraceRequest, at: float) -> None:
            if at > env.now:
                env.timeout(at - env.now).callbacks.append(lambda _: send(request, at))
            else:
                send(request, env.now)

        def done(client: SimClient) -> None:
            following = self.sessions.done(client.request, env.now)
            if following is not None:
                send_at(*following)

        for request in self.requests:
            if not self.known:
                if request.arrival_s < self.latest:
                    raise ValueError(f"request {request.id!r} arrives at {request.arrival_s}, "
                                     f"before the one before it ({self.latest})")
                check_reader(request)
                self.latest = request.arrival_s
            delay = request.arrival_s - env.now
            if delay > 0:
                yield env.timeout(delay)
            at = self.sessions.arrived(request, env.now)
            if at is not None:
                send_at(request, at)


def _tell_progress(env: simpy.Environment, arrivals: Arrivals, tally: Tally,
                   progress: Progress):
    """Wakes every 1/PROGRESS_TICKS of the trace's span (of the arrivals read so far,
    for a trace read as it goes; or of the time simulated so far, once that is
    longer) and ends when nothing else is left to happen. It changes nothing, so the
    replay is the same without it."""
    while True:
        yield env.timeout(max(arrivals.latest, env.now, 1.0) / PROGRESS_TICKS)
        progress(env.now, tally.requests)
        if env.peek() == float("inf"):
            return
