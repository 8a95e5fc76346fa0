"""Calibration: drive the live server with a workload that covers the plan
features, fit the step-cost model from the steps the server recorded meanwhile,
measure what lies outside the steps from the clients' timings, and save it all as
a profile named after the server's hardware, model and dtype."""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from live.client.loadgen import LiveReplay, replay as live_replay
from live.runner.models import cache_root
from live.runner.hardware import hardware_name
from scheduler.settings import ServeSettings
from sim import FitReport, Profile, build_profile, load_profile, save_profile
from traces import TraceRequest

from .hardware import model_name, profile_name, short_dtype
from .live_target import Access, LiveTarget, live_target
from .workloads import calibration_workload

WARMUP = [TraceRequest("warmup-0", 0.0, 32, 4), TraceRequest("warmup-1", 0.0, 200, 4)]


def cached_profile_path(hardware: str, model: str, dtype: str) -> Path:
    """Profiles measured earlier, by the hardware, model and dtype of their server."""
    return cache_root() / "profiles" / f"{profile_name(hardware, model, dtype)}.json"


def profile_key(server: ServeSettings | str, access: Access = Access()) -> tuple[str, str, str]:
    """The hardware, model and dtype a cached profile of `server` is named after."""
    if isinstance(server, str):
        with LiveTarget(server, access) as target:
            return target.info.hardware, target.info.model, target.info.dtype
    return hardware_name(server.device), model_name(server.model), server.dtype


def measured_profile(server: ServeSettings | str, out_dir: Path, *, recalibrate: bool = False,
                     time_scale: float = 1.0, access: Access = Access(), log=print) -> Profile:
    """The profile measured earlier for `server`'s hardware, model and dtype, or
    (none cached, or `recalibrate`) a calibration run now: the step costs `make
    run` uses, so that every comparison of this machine shares them."""
    cached = cached_profile_path(*profile_key(server, access))
    if cached.exists() and not recalibrate:
        log(f"using the profile measured earlier on this hardware: {cached}")
        return load_profile(cached)
    profile, _ = calibrate(server, out_dir, time_scale=time_scale, access=access, log=log)
    return profile


def calibrate(server: ServeSettings | str, out_dir: Path,
              workload: list[TraceRequest] | None = None, log=print,
              time_scale: float = 1.0, access: Access = Access()) -> tuple[Profile, Path]:
    """`server`: the settings to start one with, or the URL of one running (reached
    with `access`). `time_scale` packs the default workload's arrivals closer (see
    `calibration_workload`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with live_target(server, out_dir / "calibration-server.log", access) as target:
        info = target.info
        workload = workload or calibration_workload(
            info.scheduler["max_batch"], time_scale=time_scale,
            max_model_len=info.scheduler["max_model_len"])
        log(f"calibrating: {info.model} on {info.hardware} ({info.device}, {info.dtype}) at "
            f"{target.url}, {len(workload)} requests")
        keys = target.access.replay_options()
        live_replay(target.url, WARMUP, **keys)  # first steps pay one-off allocation costs
        mark = target.last_step()
        with tqdm(total=len(workload), unit="req", desc="calibration", file=sys.stderr,
                  dynamic_ncols=True, disable=not sys.stderr.isatty()) as bar:
            result = live_replay(target.url, workload, on_done=bar.update, **keys)
        steps = target.steps_after(mark)
    if not steps:
        raise RuntimeError(f"the server at {target.url} recorded no step during the calibration")
    step_log = out_dir / "calibration-steps.jsonl"
    step_log.write_text("".join(json.dumps(s) + "\n" for s in steps))
    config = info.scheduler
    profile = build_profile(step_log, hardware=info.hardware, model=info.model,
                            dtype=short_dtype(info.dtype), device=info.device,
                            block_size=config["block_size"], max_batch=config["max_batch"],
                            num_blocks=config["num_blocks"])
    profile = replace(profile, overheads=overheads(result, target.clock_offset_s))
    path = out_dir / "profile.json"
    save_profile(profile, path)
    cached = cached_profile_path(info.hardware, info.model, info.dtype)
    cached.parent.mkdir(parents=True, exist_ok=True)
    save_profile(profile, cached)
    fit = FitReport(**profile.fit)
    log(f"fitted {profile.steps} steps: held-out MAPE {fit.mape:.1%}, p90 error "
        f"{fit.p90_rel_error:.1%}, R² {fit.r2:.3f}; by kind: {fit.describe_kinds()}; "
        f"overheads {profile.overheads}")
    return profile, path


def overheads(result: LiveReplay, clock_offset_s: float = 0.0) -> dict[str, float]:
    """From arrival to admission for requests that found the engine idle (the solo
    ones): HTTP, validation and the step loop waking up. From the engine's first
    token to the client's: delivery. The engine's times are on the server's clock,
    `clock_offset_s` ahead of the client's."""
    solo = [o for o in result.outcomes if o.id.startswith("solo-") and o.admitted_s is not None]
    delivered = [o.first_token_client_s - o.first_token_engine_s + clock_offset_s
                 for o in result.outcomes
                 if o.first_token_client_s is not None and o.first_token_engine_s is not None]
    return {
        "request_s": max(0.0, statistics.median(o.admitted_s - clock_offset_s - o.arrival_s
                                                for o in solo)),
        "delivery_s": max(0.0, statistics.median(delivered)),
    }
