"""The comparison: one trace replayed against the live server by the real client
and in the simulator with a profile and the server's own settings, and the same
summary computed from both: from the outcomes, the engine's time series (the live
one read back from its step log) and what the engine made for each request (the
live server's records of this run's requests, so that other clients of a shared
server count for nothing)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from live.client.loadgen import replay as live_replay
from scheduler.settings import ServeSettings
from sim import (Profile, ReplaySetup, TimeSeries, build_setup, replay as sim_replay,
                 summarize_replay, write_step_log)
from sim.fitted_ranges import Beyond
from sim.replay import Probe
from traces import TraceRequest
from traces.outcome import RequestOutcome, write_outcomes
from traces.summary import Summary, Tally

from .live_series import series_from_steps
from .live_target import Access, live_target
from .server_info import ServerInfo


@dataclass
class Side:
    outcomes: list[RequestOutcome]
    series: TimeSeries
    summary: Summary
    events_discarded: int | None = None
    """Events made for streams the server had already closed (None: not known)."""


@dataclass
class Comparison:
    live: Side
    sim: Side
    leavers: int
    server: ServerInfo
    """What the live server ran; the simulator ran the same settings."""
    stats_after: dict | None = None
    """The live server's /stats once the replay had settled."""
    records: list[dict] = field(default_factory=list)
    """The live server's records of this run's requests (`GET /v1/requests`), by
    `<prefix><trace id>`, with their times on this host's clock."""
    started_unix: float = 0.0
    """When the live replay started: time 0 of its outcomes."""
    beyond_fit: list[Beyond] = field(default_factory=list)
    """The features the simulated replay took past the profile's fit."""
    steps: list[dict] = field(default_factory=list)
    """The live server's log of the steps it ran for this replay."""


def compare(trace: list[TraceRequest], profile: Profile, server: ServeSettings | str,
            out_dir: Path, log=print, access: Access = Access(),
            probe: Probe | None = None, recv_buffer_bytes: int | None = None) -> Comparison:
    """`server`: the settings to start one with, or the URL of one running (reached
    with `access`). `probe` runs beside the simulated replay (`sim.replay`);
    `recv_buffer_bytes`: the live clients' socket receive buffer (None: the OS's)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with live_target(server, out_dir / "live-server.log", access) as target:
        info = target.info
        log(f"live: replaying {len(trace)} requests against {target.url}")
        mark, finished_mark = target.last_step(), target.last_request()
        prefix = f"twin-{secrets.token_hex(4)}-"  # another run's names never clash with these
        result = live_replay(target.url, trace, request_id_prefix=prefix,
                             recv_buffer_bytes=recv_buffer_bytes,
                             **target.access.replay_options())
        steps = target.steps_after(mark)
        records = [r for r in target.requests_after(finished_mark) if r["id"].startswith(prefix)]
        unrecorded = add_engine_view(result.outcomes, records, prefix, result.started_unix)
    write_step_log(out_dir / "live-steps.jsonl", steps)
    if unrecorded:
        raise RuntimeError(f"the server at {target.url} has no record of {len(unrecorded)} "
                           f"accepted requests ({', '.join(unrecorded[:5])}): without them "
                           f"the tokens it made, and wasted, are unknown")
    live_series = series_from_steps(steps, result.started_unix)
    setup = simulated_server(profile, info.sim_settings())
    live = Side(result.outcomes, live_series, summarize_replay(
        Tally.of(result.outcomes, setup.slo), live_series,
        preemptions=sum(r["preemptions"] for r in records),
        recomputed_tokens=sum(r["recomputed_tokens"] for r in records)),
        _dropped_events(result.stats_before, result.stats_after))
    log("sim: replaying the same trace on the virtual clock")
    simulated = sim_replay(trace, setup, probe)
    sim = Side(simulated.outcomes, simulated.series, simulated.summary,
               simulated.events_discarded)
    write_outcomes(out_dir / "live-outcomes.parquet", live.outcomes)
    write_outcomes(out_dir / "sim-outcomes.parquet", sim.outcomes)
    return Comparison(live, sim, leavers=sum(r.client.leaves for r in trace), server=info,
                      stats_after=result.stats_after, records=records,
                      started_unix=result.started_unix, beyond_fit=simulated.beyond_fitted,
                      steps=steps)


def simulated_server(profile: Profile, sim_settings: dict) -> ReplaySetup:
    """The simulator set up as a live server ran (its `ServerInfo.sim_settings()`),
    with the profile's step costs, fitted ranges and overheads."""
    return build_setup(profile.cost_model(), fitted=profile.ranges(),
                       step_scatter=profile.step_scatter, **sim_settings, **profile.overheads)


def _dropped_events(before: dict | None, after: dict | None) -> int | None:
    """Events the live server dropped for closed streams over the replay, from its /stats."""
    if before is None or after is None or "dropped_events" not in after:
        return None
    return after["dropped_events"] - before.get("dropped_events", 0)


def add_engine_view(outcomes: list[RequestOutcome], records: list[dict], prefix: str,
                    started_unix: float) -> list[str]:
    """What only the server knows of each live request, from its records (named
    `<prefix><trace id>`): when the engine admitted it and made its first token,
    the tokens it made, those made after the client left, and that a stream its
    client saw break was dropped as a slow reader's. Returns the ids of
    the accepted requests that have no record."""
    by_id = {r["id"].removeprefix(prefix): r for r in records if r["id"].startswith(prefix)}
    unrecorded = []
    for o in outcomes:
        record = by_id.get(o.id)
        if record is None:
            if o.refused is None:
                unrecorded.append(o.id)
            continue
        o.tokens_generated = record["completion_tokens"]
        o.tokens_after_leave = record["tokens_after_leave"]
        if o.finish_reason == "error" and record["finish_reason"] == "slow_client":
            # the broken connection was the server cutting a dropped reader that took
            # nothing: a drop, as the simulator records it
            o.finish_reason = "slow_client"
        # a request may be admitted and end before its first token (a client
        # leaving during a chunked prefill)
        if record["admitted_unix"] is not None:
            o.admitted_s = record["admitted_unix"] - started_unix
        if record["first_token_unix"] is not None:
            o.first_token_engine_s = record["first_token_unix"] - started_unix
    return unrecorded
