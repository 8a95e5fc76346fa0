"""Command line: `python -m sim replay|sweep|fit ...` (see --help of each)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from scheduler import BACKLOG_POLICIES

from .cost_model import ConstantCost, CostModel
from .metrics import format_summary
from .profile import CPU_SMOLLM2, build_profile, load_profile, save_profile
from .replay import replay
from .settings import build_setup
from .sweep import format_sweep, parse_param, sweep
from .wire import WIRE_FORMATS

ENGINE_DEFAULTS = {"block_size": 16, "max_batch": 32, "num_blocks": 4096}
"""Engine settings when neither the command line nor the profile gives them."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except (OSError, ValueError) as e:  # bad files and settings: say what, no traceback
        print(f"python -m sim {args.command}: {e}", file=sys.stderr)
        return 2


def _replay(args) -> int:
    trace, cost, settings = _inputs(args)
    result = replay(trace, build_setup(cost, **settings))
    print(format_summary(result.summary))
    print(f"{len(trace)} requests, {result.steps} steps, {result.wall_s:.2f} s wall")
    if args.out:
        from traces.outcome import write_outcomes

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_outcomes(out / "outcomes.jsonl", result.outcomes)
        (out / "summary.json").write_text(json.dumps(result.summary.as_dict(), indent=2) + "\n")
        (out / "setup.json").write_text(json.dumps(
            {"trace": str(args.trace), "cost": {type(cost).__name__: asdict(cost)}, **settings},
            indent=2) + "\n")
        with open(out / "timeseries.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in result.series.rows())
        print(f"wrote {out}/outcomes.jsonl, summary.json, setup.json, timeseries.jsonl")
    return 0


def _sweep(args) -> int:
    trace, cost, settings = _inputs(args)
    grid = dict(parse_param(p) for p in args.param)
    print(format_sweep(sweep(trace, cost, settings, grid)))
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
    from traces import load_trace  # the trace loaders are only needed here

    trace = load_trace(args.trace)
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


_SETTING_OPTIONS = ("policy", "wire", "max_queued", "resume_at", "stall_timeout_s",
                    "max_batch", "num_blocks", "block_size", "max_waiting", "max_model_len",
                    "max_prefill_tokens", "request_s", "delivery_s", "disconnect_detect_s",
                    "transport_bytes")


def _replay_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, help="a trace in any format traces.load_trace reads")
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
    outside = p.add_argument_group("outside the engine (sim.overheads.Overheads)")
    for name in ("request_s", "delivery_s", "disconnect_detect_s"):
        outside.add_argument("--" + name.replace("_", "-"), type=float)
    outside.add_argument("--transport-bytes", type=int)
    outside.add_argument("--wire", default="twinstep", choices=sorted(WIRE_FORMATS))


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
                   help="a setting to vary (repeat for a grid), e.g. max_batch=8,16,32")
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
