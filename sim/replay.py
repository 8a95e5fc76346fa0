"""Replay a trace against the simulated server and collect what happened."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import simpy

from scheduler import Scheduler
from traces.outcome import RequestOutcome
from traces.record import TraceRequest
from traces.summary import Summary

from .serving.client import SimClient
from .serving.engine import SimEngine
from .serving.hub import Hub
from .settings import ReplaySetup
from .summary import refusals_by_reason, summarize_replay
from .timeseries import TimeSeries


@dataclass
class Replay:
    outcomes: list[RequestOutcome]
    """In trace order."""
    series: TimeSeries
    summary: Summary
    steps: int
    """Plans the core made (steps and empty plans)."""
    events_discarded: int
    """Events made for streams the server had already closed."""
    wall_s: float
    refusals: dict[str, int]
    """Requests refused before their stream began, by `Refusal` value."""


class ReplayNotDrained(RuntimeError):
    """The replay ended with requests or blocks still held: a leak, or a stream
    that could never end."""


Probe = Callable[[simpy.Environment, Scheduler], Iterable]
"""A SimPy process body run beside the replay, e.g. to look at the core at given
times; it must end."""

Progress = Callable[[float, int], None]
"""Told now and then the simulated time and how many requests have finished
(refused, left, or read to their last event)."""

PROGRESS_TICKS = 200
"""Progress is told about this many times per trace span, fewer as a long drain
goes on: a few hundred wakes whatever the trace."""


def replay(trace: list[TraceRequest], setup: ReplaySetup, probe: Probe | None = None,
           progress: Progress | None = None) -> Replay:
    started = time.perf_counter()
    ids = [r.id for r in trace]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids in a trace must be unique")
    env = simpy.Environment()
    core = Scheduler(setup.config)
    series = TimeSeries()
    engine = SimEngine(env, core, setup.cost, series,
                       stops_early=setup.max_tokens_factor > 1)
    hub = Hub(env, core, setup.policy, setup.overheads, setup.wire, engine.wake,
              resume_grace_s=setup.resume_grace_s, max_tokens_factor=setup.max_tokens_factor)
    clients = [SimClient(env, r, hub, setup.overheads) for r in trace]
    arriving = sorted(clients, key=lambda c: c.request.arrival_s)
    env.process(_arrivals(env, arriving))
    env.process(engine.run(hub))
    if probe is not None:
        env.process(probe(env, core))
    if progress is not None and arriving:
        env.process(_tell_progress(env, arriving, progress))
    env.run()
    if not core.is_drained():
        raise ReplayNotDrained(f"the core is not drained after the replay: {core.snapshot()}")
    stuck = [c.request.id for c in clients if not c.done]
    if stuck:
        raise ReplayNotDrained(f"{len(stuck)} clients never saw their stream end, e.g. {stuck[:5]}")
    outcomes = [c.outcome for c in clients]
    summary = summarize_replay(outcomes, series, preemptions=core.preemptions,
                               recomputed_tokens=core.recomputed_tokens)
    return Replay(outcomes, series, summary, core.snapshot().step, hub.events_discarded,
                  time.perf_counter() - started, refusals_by_reason(outcomes))


def _arrivals(env: simpy.Environment, clients: list[SimClient]):
    for client in clients:
        delay = client.request.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        env.process(client.run())


def _tell_progress(env: simpy.Environment, arriving: list[SimClient], progress: Progress):
    """Wakes every 1/PROGRESS_TICKS of the trace's span (or of the time simulated so
    far, once that is longer), looks only at clients in flight, and ends when nothing
    else is left to happen. It changes nothing, so the replay is the same without it."""
    span = max(arriving[-1].request.arrival_s, 1.0)
    upcoming = iter(arriving)
    next_client = next(upcoming, None)
    in_flight: list[SimClient] = []
    finished = 0
    while True:
        yield env.timeout(max(span, env.now) / PROGRESS_TICKS)
        while next_client is not None and next_client.request.arrival_s <= env.now:
            in_flight.append(next_client)
            next_client = next(upcoming, None)
        going = [c for c in in_flight if not c.done]
        finished += len(in_flight) - len(going)
        in_flight = going
        progress(env.now, finished)
        if env.peek() == float("inf"):
            return
