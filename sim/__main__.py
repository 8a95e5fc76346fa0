"""Command line: `python -m sim replay|sweep|fit ...` (see --help of each).

    python -m sim replay traces/samples/mixed.jsonl --policy pause --out runs/mixed
    python -m sim sweep TRACE --param max_batch=8,16 --param rate_scale=1,2 --jobs 4
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict
from pathlib import Path

from scheduler import ADMISSION_POLICIES, BACKLOG_POLICIES
from traces import load_trace
from traces.load_options import add_load_options, load_options
from traces.summary import format_summary

from .cost_model import ConstantCost, CostModel
from .profile import CPU_SMOLLM2, build_profile, load_profile, save_profile
from .progress import ReplayBar, SweepBar, wanted
from .replay import replay
from .settings import build_setup
from .sweep import format_sweep, parse_param, sweep, write_sweep
from .wire import WIRE_FORMATS

ENGINE_DEFAULTS = {"block_size": 16, "max_batch": 32, "num_blocks": 4096}
"""Engine settings when neither the command line nor the profile gives them."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("replay", "sweep"):
        args.trace = args.trace or args.trace_option
    try:
        return args.run(args)
    # Bad files and settings, or a missing optional extra: say what, no traceback.
    except (OSError, ValueError, ImportError) as e:
        print(f"python -m sim {args.command}: {e}", file=sys.stderr)
        return 2


def _replay(args) -> int:
    trace, cost, settings = _inputs(args)
    setup = build_setup(cost, **settings)
    if wanted(args.quiet):
        bar = ReplayBar(len(trace))
        try:
            result = replay(trace, setup, progress=bar)
        finally:
            bar.close()
    else:
        result = replay(trace, setup)
    print(format_summary(result.summary))
    print(f"{len(trace)} requests, {result.steps} steps, {result.wall_s:.2f} s wall")
    if args.out:
        from traces.outcome import write_outcomes

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_outcomes(out / "outcomes.jsonl", result.outcomes)
        (out / "summary.json").write_text(json.dumps(result.summary.as_dict(), indent=2) + "\n")
        (out / "setup.json").write_text(json.dumps(_about(args, cost, settings), indent=2) + "\n")
        with open(out / "timeseries.jsonl", "w") as f:
            f.writelines(result.series.json_lines())
        print(f"wrote {out}/outcomes.jsonl, summary.json, setup.json, timeseries.jsonl")
    return 0


def _sweep(args) -> int:
    trace, cost, settings = _inputs(args)
    grid = dict(parse_param(p) for p in args.param)
    bar = SweepBar(math.prod(map(len, grid.values()))) if wanted(args.quiet) else None
    try:
        rows = sweep(trace, cost, settings, grid, jobs=args.jobs, ray_address=args.ray, on_done=bar)
    finally:
        if bar is not None:
            bar.close()
    print(format_sweep(rows))
    if args.out:
        paths = write_sweep(Path(args.out), rows, {**_about(args, cost, settings), "grid": grid})
        print("wrote " + ", ".join(map(str, paths)))
    return 0


def _fit(args) -> int:
    profile = build_profile(args.step_log, args.hardware, args.model, args.dtype,
                            device=args.device, block_size=args.block_size,
                            max_batch=args.max_batch, num_blocks=args.num_blocks,
                            holdout_fraction=args.holdout_fraction, seed=args.seed)
    save_profile(profile, args.output)
    for name, value in profile.coefficients.items():
        print(f"{name:<18} {value:.6g}")
    report = profile.fit
    print(f"{profile.steps} steps ({report['holdout_steps']} held out): MAPE {report['mape']:.2%}, "
          f"p90 |rel err| {report['p90_rel_error']:.2%}, R2 {report['r2']:.4f}")
    print(f"wrote {args.output}")
    return 0


def _inputs(args) -> tuple[list, CostModel, dict]:
    """The trace, the cost model and the flat settings the command line gives."""
    trace = load_trace(args.trace, **load_options(args))
    engine_defaults = dict(ENGINE_DEFAULTS)
    if args.constant_cost is not None:
        cost: CostModel = ConstantCost(args.constant_cost)
    else:
        profile = load_profile(args.profile)
        cost = profile.cost_model()
        engine_defaults.update({k: getattr(profile, k) for k in ENGINE_DEFAULTS
                                if getattr(profile, k) is not None})
        engine_defaults.update(profile.overheads)  # what its calibration measured
    settings = {name: getattr(args, name) for name in _SETTING_OPTIONS}
    for name, default in engine_defaults.items():
        if settings[name] is None:
            settings[name] = default
    return trace, cost, {k: v for k, v in settings.items() if v is not None}


def _about(args, cost: CostModel, settings: dict) -> dict:
    """What a replay's results came from, written beside them."""
    return {"trace": str(args.trace), "load": load_options(args),
            "cost": {type(cost).__name__: asdict(cost)}, **settings}


_SETTING_OPTIONS = ("policy", "wire", "max_queued", "resume_at", "stall_timeout_s",
                    "max_batch", "num_blocks", "block_size", "max_waiting", "max_model_len",
                    "max_prefill_tokens", "chunked_prefill", "admission", "request_s", "delivery_s",
                    "disconnect_detect_s", "transport_bytes", "event_padding", "resume_grace_s",
                    "max_tokens_factor")


def _replay_options(p: argparse.ArgumentParser) -> None:
    trace = p.add_mutually_exclusive_group(required=True)
    trace.add_argument("trace", nargs="?", help="a trace in any format traces.load_trace reads: "
                       "native or Mooncake JSONL, Azure, BurstGPT or Vidur CSV (told from the file)")
    trace.add_argument("--trace", dest="trace_option", metavar="TRACE", help="the same, as an option")
    add_load_options(p.add_argument_group("loading the trace (as in python -m traces convert)"))
    cost = p.add_mutually_exclusive_group()
    cost.add_argument("--profile", default=CPU_SMOLLM2,
                      help=f"cost profile: a JSON path or a shipped name (default {CPU_SMOLLM2})")
    cost.add_argument("--constant-cost", type=float, metavar="S", help="every step takes S seconds")
    policy = p.add_argument_group("backlog policy")
    policy.add_argument("--policy", default="unbounded", choices=sorted(BACKLOG_POLICIES))
    policy.add_argument("--max-queued", type=int)
    policy.add_argument("--resume-at", type=int)
    policy.add_argument("--stall-timeout-s", type=float)
    engine = p.add_argument_group("engine (defaults: the profile's, else %s)" % ENGINE_DEFAULTS)
    for name in ("max_batch", "num_blocks", "block_size", "max_waiting", "max_model_len",
                 "max_prefill_tokens"):
        engine.add_argument("--" + name.replace("_", "-"), type=int)
    engine.add_argument("--chunked-prefill", action="store_true", default=None,
                        help="cut prompts into chunks of --max-prefill-tokens, prefilled a step "
                             "at a time beside the decodes")
    engine.add_argument("--admission", choices=sorted(ADMISSION_POLICIES),
                        help="reserve each request's whole length (default), or hold blocks as "
                             "tokens are written and preempt when none is free (optimistic)")
    outside = p.add_argument_group("outside the engine (sim.overheads.Overheads)")
    for name in ("request_s", "delivery_s", "disconnect_detect_s"):
        outside.add_argument("--" + name.replace("_", "-"), type=float)
    outside.add_argument("--transport-bytes", type=int)
    outside.add_argument("--wire", default="twinstep", choices=sorted(WIRE_FORMATS))
    outside.add_argument("--max-tokens-factor", type=float,
                         help="clients ask for this many times the tokens they get, which "
                              "whole-length reservation holds (default 1)")
    outside.add_argument("--resume-grace-s", type=float,
                         help="a stream whose client left stays paused this long, as the "
                              "server's --resume-grace-s, before it is cancelled")
    outside.add_argument("--event-padding", type=int, default=0,
                         help="bytes of comment after every event, as the server's --event-padding")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none either when stderr is not a terminal)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("replay", help="replay a trace and print its summary")
    _replay_options(p)
    p.add_argument("--out", help="write outcomes.jsonl, summary.json, setup.json, timeseries.jsonl here")
    p.set_defaults(run=_replay)
    p = commands.add_parser("sweep", help="replay a trace under combinations of settings")
    _replay_options(p)
    p.add_argument("--param", action="append", required=True, metavar="NAME=V1,V2,...",
                   help="a setting to vary (repeat for a grid), e.g. max_batch=8,16,32, "
                   "policy=unbounded,pause, num_blocks=512,1024, rate_scale=0.5,1,2 (arrivals "
                   "that many times as fast)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                       help="replays at once, on local processes (default: the CPU count)")
    where.add_argument("--ray", metavar="ADDRESS",
                       help="run the replays on the Ray cluster at ADDRESS ('auto', 'ray://host:10001', "
                       "or 'local' to start one here); needs the ray extra, and this package "
                       "on the cluster's workers")
    p.add_argument("--out", help="write sweep.csv and sweep.json (every summary figure) here")
    p.set_defaults(run=_sweep)
    p = commands.add_parser("fit", help="fit a cost profile from a live step log")
    p.add_argument("step_log")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--hardware", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", required=True)
    p.add_argument("--device")
    p.add_argument("--block-size", type=int)
    p.add_argument("--max-batch", type=int)
    p.add_argument("--num-blocks", type=int)
    p.add_argument("--holdout-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=_fit)
    return parser


if __name__ == "__main__":
    sys.exit(main())
