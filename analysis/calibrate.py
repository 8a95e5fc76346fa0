"""Calibration: serve, drive the server with a workload that covers the plan
features, fit the step-cost model from the server's step log, measure what lies
outside the steps from the clients' timings, and save it all as a profile."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import httpx

from live.loadgen import LiveReplay, replay as live_replay
from live.models import cache_root
from sim import Profile, build_profile, load_step_log, save_profile
from traces import TraceRequest

from .hardware import hardware_name, slug
from .live_series import steps_during
from .serve_options import ServeOptions
from .serve_process import live_server
from .workloads import calibration_workload

WARMUP = [TraceRequest("warmup-0", 0.0, 32, 4), TraceRequest("warmup-1", 0.0, 200, 4)]


def cached_profile_path(options: ServeOptions, model_name: str) -> Path:
    """Profiles measured here, by hardware, model and dtype."""
    name = f"{slug(hardware_name(options.device))}-{slug(model_name)}-{options.dtype_short}.json"
    return cache_root() / "profiles" / name


def calibrate(options: ServeOptions, out_dir: Path, workload: list[TraceRequest] | None = None,
              log=print) -> tuple[Profile, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    step_log = out_dir / "calibration-steps.jsonl"
    workload = workload or calibration_workload(options.max_batch)
    log(f"calibrating: serving {options.model or 'the embedded SmolLM2'} on {options.device}, "
        f"{len(workload)} requests")
    with live_server([*options.serve_args(), "--step-log", str(step_log)],
                     out_dir / "calibration-server.log") as url:
        model_name = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        live_replay(url, WARMUP)  # first steps pay one-off allocation costs
        result = live_replay(url, workload)
    steps = steps_during(load_step_log(step_log), result.started_unix)
    fitted_log = out_dir / "calibration-steps-fitted.jsonl"
    fitted_log.write_text("".join(json.dumps(s) + "\n" for s in steps))
    profile = build_profile(fitted_log, hardware=hardware_name(options.device), model=model_name,
                            dtype=options.dtype_short, device=options.device,
                            block_size=options.block_size, max_batch=options.max_batch,
                            num_blocks=options.num_blocks)
    profile = replace(profile, overheads=overheads(result))
    path = out_dir / "profile.json"
    save_profile(profile, path)
    cached = cached_profile_path(options, model_name)
    cached.parent.mkdir(parents=True, exist_ok=True)
    save_profile(profile, cached)
    fit = profile.fit
    log(f"fitted {profile.steps} steps: held-out MAPE {fit['mape']:.1%}, p90 error "
        f"{fit['p90_rel_error']:.1%}, R² {fit['r2']:.3f}; overheads {profile.overheads}")
    return profile, path


def overheads(result: LiveReplay) -> dict[str, float]:
    """From arrival to admission for requests that found the engine idle (the solo
    ones): HTTP, validation and the step loop waking up. From the engine's first
    token to the client's: delivery."""
    solo = [o for o in result.outcomes if o.id.startswith("solo-") and o.admitted_s is not None]
    delivered = [o.first_token_client_s - o.first_token_engine_s for o in result.outcomes
                 if o.first_token_client_s is not None and o.first_token_engine_s is not None]
    return {
        "request_s": max(0.0, statistics.median(o.admitted_s - o.arrival_s for o in solo)),
        "delivery_s": max(0.0, statistics.median(delivered)),
    }
