"""The comparison: one trace replayed against the live server by the real client
and in the simulator with a profile, and the same figures computed from both."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from live.loadgen import replay as live_replay
from sim import Profile, TimeSeries, build_setup, load_step_log, replay as sim_replay
from traces import TraceRequest
from traces.outcome import RequestOutcome, write_outcomes

from .figures import Figures, figures
from .live_series import series_from_steps, steps_during
from .serve_options import ServeOptions
from .serve_process import live_server


@dataclass
class Side:
    outcomes: list[RequestOutcome]
    series: TimeSeries
    figures: Figures


@dataclass
class Comparison:
    live: Side
    sim: Side
    leavers: int


def compare(trace: list[TraceRequest], profile: Profile, options: ServeOptions, out_dir: Path,
            log=print) -> Comparison:
    out_dir.mkdir(parents=True, exist_ok=True)
    step_log = out_dir / "live-steps.jsonl"
    log(f"live: replaying {len(trace)} requests against the server")
    with live_server([*options.serve_args(), "--step-log", str(step_log)],
                     out_dir / "live-server.log") as url:
        result = live_replay(url, trace)
    steps = steps_during(load_step_log(step_log), result.started_unix)
    live_series = series_from_steps(steps, result.started_unix)
    live = Side(result.outcomes, live_series,
                figures(result.outcomes, live_series, result.wasted_tokens_total))
    log("sim: replaying the same trace on the virtual clock")
    setup = build_setup(profile.cost_model(), **options.sim_settings(), **profile.overheads)
    simulated = sim_replay(trace, setup)
    sim = Side(simulated.outcomes, simulated.series,
               figures(simulated.outcomes, simulated.series,
                       sum(o.tokens_after_leave for o in simulated.outcomes)))
    write_outcomes(out_dir / "live-outcomes.jsonl", live.outcomes)
    write_outcomes(out_dir / "sim-outcomes.jsonl", sim.outcomes)
    return Comparison(live, sim, leavers=sum(r.client.leaves for r in trace))
