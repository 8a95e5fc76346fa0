"""Calibration: drive the live server with a workload that covers the plan
features, fit the step-cost model from the steps the server recorded meanwhile,
measure what lies outside the steps from the clients' timings beside the server's
records, and save it all as a profile named after the server's hardware, model
and dtype."""
from __future__ import annotations

import json
import secrets
import statistics
import time
from dataclasses import replace
from pathlib import Path

from live.client.loadgen import LiveReplay, replay as live_replay
from live.runner.models import cache_root
from live.runner.hardware import hardware_name
from scheduler.settings import ServeSettings
from sim import FitReport, Profile, build_profile, load_profile, save_profile
from traces import TraceRequest

from .hardware import model_name, profile_name, short_dtype
from .live_target import Access, LiveTarget, live_target
from .progress import Progress
from .workloads import CHUNK_BUDGETS, calibration_workload, chunk_workload

WARMUP = [TraceRequest("warmup-0", 0.0, 32, 4), TraceRequest("warmup-1", 0.0, 200, 4)]
MEASURED_OVERHEADS = ("request_s", "front_s", "wake_s", "delivery_s")
"""The `Overheads` a calibration measures (see `overheads`)."""
PHASE_PAUSE_S = 0.25
"""The quiet between one phase of the workload draining and the next one's start."""
BATCH_REACH = 2
"""A server the calibration starts for its default workload batches this many times
its own limit, and the workload's ladder climbs that far: a what-if that doubles
the batch is then priced from measured steps rather than extrapolated."""


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
              workload: list[list[TraceRequest]] | None = None, log=print,
              time_scale: float = 1.0, access: Access = Access(),
              chunks: list[TraceRequest] | None = None) -> tuple[Profile, Path]:
    """`server`: the settings to start one with, or the URL of one running (reached
    with `access`). `workload`: phases, each sent once the server has drained the
    one before (by default `calibration_workload`'s). `time_scale` packs the
    default workloads' arrivals closer (see `calibration_workload`). `chunks` give
    the fit chunks beside decodes (none: with the default workload
    `chunk_workload`, with another nothing): when `server` is started here, once
    at each of `CHUNK_BUDGETS` and at its own budget if it prefills in chunks, on
    it at its own and on a server like it for each other; when it runs elsewhere,
    on it if it prefills in chunks. A server started here for the default workload batches
    `BATCH_REACH` times as many sequences as `server` does."""
    out_dir.mkdir(parents=True, exist_ok=True)
    reaching = workload is None and not isinstance(server, str)
    started = replace(server, max_batch=server.max_batch * BATCH_REACH) if reaching else server
    with live_target(started, out_dir / "calibration-server.log", access) as target:
        info = target.info
        config = info.scheduler
        max_batch = server.max_batch if reaching else config["max_batch"]
        if chunks is None and workload is None:
            chunks = chunk_workload(max_batch, time_scale, config["max_model_len"])
        workload = workload or calibration_workload(
            max_batch, time_scale=time_scale, max_model_len=config["max_model_len"],
            ladder_top=config["max_batch"])
        own_budget = config["max_prefill_tokens"] if config["chunked_prefill"] else None
        if not chunks:
            budgets = []
        elif isinstance(server, str):
            budgets = [own_budget] if own_budget else []
            if not budgets:
                log(f"the server at {server} prefills whole prompts: chunks beside decodes "
                    f"are not calibrated")
        else:
            budgets = sorted({*CHUNK_BUDGETS, own_budget} - {None}, reverse=True)
        requests = sum(map(len, workload)) + len(chunks or []) * len(budgets)
        log(f"calibrating: {info.model} on {info.hardware} ({info.device}, {info.dtype}) at "
            f"{target.url}, {requests} requests")
        progress = Progress(requests, "calibration", log)
        results, steps, records = _drive(target, workload, progress)
        if own_budget in budgets:
            steps += _drive(target, [chunks], progress)[1]
        url = target.url
    for budget in budgets:
        if budget != own_budget:
            chunking = replace(server, chunked_prefill=True, max_prefill_tokens=budget)
            with live_target(chunking, out_dir / f"calibration-chunks-{budget}-server.log",
                             access) as target:
                steps += _drive(target, [chunks], progress)[1]
    progress.close()
    if not steps:
        raise RuntimeError(f"the server at {url} recorded no step during the calibration")
    step_log = out_dir / "calibration-steps.jsonl"
    step_log.write_text("".join(json.dumps(s) + "\n" for s in steps))
    profile = build_profile(step_log, hardware=info.hardware, model=info.model,
                            dtype=short_dtype(info.dtype), device=info.device,
                            block_size=config["block_size"], max_batch=config["max_batch"],
                            num_blocks=config["num_blocks"])
    profile = replace(profile, overheads=overheads(results, records, steps))
    unmeasured = [name for name in MEASURED_OVERHEADS if name not in profile.overheads]
    if unmeasured:
        log(f"the workload measured no {', '.join(unmeasured)} (it needs requests named "
            f"solo-… sent one at a time, some finding the engine idle, and burst-… sent "
            f"together): 0 in the simulator")
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


def _drive(target: LiveTarget, phases: list[list[TraceRequest]], progress: Progress
           ) -> tuple[list[LiveReplay], list[dict], dict[str, dict]]:
    """Replay each phase against `target` once it has drained the one before, after
    a warm-up, telling `progress` of each request done: each phase's clients'
    records, the steps the server logged meanwhile and the server's record of each
    request, by trace id."""
    keys = target.access.replay_options()
    live_replay(target.url, WARMUP, **keys)  # first steps pay one-off allocation costs
    mark, finished_mark = target.last_step(), target.last_request()
    prefix = f"cal-{secrets.token_hex(4)}-"
    results = []
    for phase in phases:
        # Each replay returns once the server has nothing running or waiting.
        time.sleep(PHASE_PAUSE_S)
        # A phase's requests mostly fall due at once and only what the server
        # did with them is measured: how late the client sent them is no error.
        results.append(live_replay(target.url, phase, on_done=progress.update,
                                   request_id_prefix=prefix, warn_lag_s=None, **keys))
    records = {r["id"].removeprefix(prefix): r for r in target.requests_after(finished_mark)
               if r["id"].startswith(prefix)}
    return results, target.steps_after(mark), records


def overheads(results: list[LiveReplay], records: dict[str, dict], steps: list[dict]) -> dict[str, float]:
    """What lies outside the steps, from the server's records (its times on this
    host's clock) beside the clients': for requests sent alone (the solo ones),
    from arrival to the server's hands (HTTP, validation, tokenizing) and, for those
    that found the engine idle in `steps` (the server's step log), from there to
    admission (the step loop waking); for requests sent together (the burst), how
    far apart the server took them in; from the engine's first token to the
    client's, delivery. A workload without solo requests or a burst measures none
    of theirs: those are left out (`Overheads` takes 0 for them)."""
    def engine_idle(unix: float) -> bool:
        # A solo request that arrives while a step runs waits for it: not a wake.
        return not any(s["start_unix"] <= unix < s["start_unix"] + s["duration_s"] for s in steps)

    # each outcome's times count from its own phase's start
    started = {o.id: result.started_unix for result in results for o in result.outcomes}
    outcomes = {o.id: o for result in results for o in result.outcomes if o.id in records}

    def client_s(i: str, unix: float) -> float:
        return unix - started[i]

    solo = [(o, records[i]) for i, o in outcomes.items()
            if i.startswith("solo-") and records[i]["admitted_unix"] is not None]
    woken = [r for _, r in solo if engine_idle(r["arrival_unix"])]
    taken = sorted(records[i]["arrival_unix"] for i in outcomes if i.startswith("burst-"))
    delivered = [o.first_token_client_s - client_s(i, records[i]["first_token_unix"])
                 for i, o in outcomes.items()
                 if o.first_token_client_s is not None and records[i]["first_token_unix"] is not None]
    measured = {}
    if solo:
        measured["request_s"] = max(0.0, statistics.median(
            client_s(o.id, r["arrival_unix"]) - o.arrival_s for o, r in solo))
    if woken:
        measured["wake_s"] = max(0.0, statistics.median(
            r["admitted_unix"] - r["arrival_unix"] for r in woken))
    if len(taken) > 1:
        measured["front_s"] = (taken[-1] - taken[0]) / (len(taken) - 1)
    if delivered:
        measured["delivery_s"] = max(0.0, statistics.median(delivered))
    return measured
