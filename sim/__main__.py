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
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from scheduler.flags import OneLineErrors, add_flags, given, positive
from scheduler.settings import SHARED, ServeSettings, scoped
from traces import TraceRequest, load_trace
from traces.jsonl import count_requests, iter_trace
from traces.load import detect_format
from traces.load_options import add_load_options, load_options
from traces.summary import format_summary

from .cost_model import ConstantCost, CostModel, ScaledCost
from .fit import FitReport
from .fitted_ranges import FittedRanges
from .profile import CPU_SMOLLM2, build_profile, load_profile, save_profile
from .progress import ReplayBar, SweepBar, wanted
from .replay import replay
from .settings import DEFAULT_POOL, SimSettings, build_setup, replay_settings
from .timeseries import TimeSeries
from .sweep import format_sweep, parse_param, sweep, write_sweep
from .summary import format_refusals, refusal_advice


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("replay", "sweep"):
        args.trace = args.trace or args.trace_option
    try:
        return args.run(args)
    # Bad files and settings, or a missing optional extra: say what, no traceback.
    except (OSError, ValueError, ImportError) as e:
        print(f"python -m sim {args.command}: {e}", file=sys.stderr)
        return 2


def _replay(args) -> int:
    """The records go to their files as the replay makes them, so that its memory is
    what is in flight, not what the trace holds."""
    trace, (cost, fitted), settings = _inputs(args, streamed=True)
    setup = build_setup(cost, fitted=fitted, **settings)
    out = Path(args.out) if args.out else None
    bar = None
    if wanted(args.quiet):
        bar = ReplayBar(len(trace) if isinstance(trace, list) else count_requests(args.trace))
    with ExitStack() as files:
        if out is None:
            records, series = _discard, TimeSeries.tallied()
        else:
            from traces.outcome import OutcomeWriter

            out.mkdir(parents=True, exist_ok=True)
            writer = files.enter_context(OutcomeWriter(out / "outcomes.parquet",
                                                       token_times=not args.no_token_times))
            records, series = writer.write, TimeSeries.written(out / "timeseries.npy")
            files.callback(series.close)
        if bar is not None:
            files.callback(bar.close)
        result = replay(trace, setup, progress=bar, records=records, series=series)
    print(format_summary(result.summary))
    if result.refusals:
        print(format_refusals(result.refusals))
    print(f"{result.summary.requests} requests, {result.steps} steps, {result.wall_s:.2f} s wall")
    advice = refusal_advice(result.summary, result.refusals)
    if advice:
        print(advice)
    for beyond in result.beyond_fitted:
        print(f"beyond the profile's fit: {beyond.describe()}")
    if out is not None:
        (out / "summary.json").write_text(json.dumps(result.summary.as_dict(), indent=2) + "\n")
        (out / "setup.json").write_text(json.dumps(_about(args, cost, settings), indent=2) + "\n")
        print(f"wrote {out}/outcomes.parquet, summary.json, setup.json, timeseries.npy")
    return 0


def _discard(outcome) -> None:
    """Records nobody asked for: the summary has what it needs of each."""


def _sweep(args) -> int:
    trace, (cost, fitted), settings = _inputs(args)
    grid = dict(parse_param(p) for p in args.param)
    bar = SweepBar(math.prod(map(len, grid.values()))) if wanted(args.quiet) else None
    try:
        rows = sweep(trace, cost, settings, grid, fitted=fitted, jobs=args.jobs,
                     ray_address=args.ray, on_done=bar)
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
    print(f"held out, by kind: {FitReport(**report).describe_kinds()}")
    print("fitted up to: " + ", ".join(f"{k} {v:,}" for k, v in profile.fitted_ranges.items()))
    print(f"wrote {args.output}")
    return 0


def _inputs(args, streamed: bool = False) -> tuple[Iterable[TraceRequest],
                                                   tuple[CostModel, FittedRanges | None], dict]:
    """The trace, the cost model with the ranges it was fitted on (if a profile
    says), and the flat settings the command line gives, with the profile's step
    scatter. With
    `streamed`, a native trace loaded as it is (no load option) is read a request at
    a time as the replay goes, so that a trace of any length replays in the memory
    of what is in flight."""
    serve = ServeSettings(**given(args, ServeSettings, scoped(SHARED)))
    options = load_options(args)
    if streamed and not options and detect_format(args.trace) == "native":
        trace: Iterable[TraceRequest] = iter_trace(args.trace, unique_ids=False)
    else:
        trace = load_trace(args.trace, **options)
    if args.constant_cost is not None:
        cost: CostModel = ConstantCost(args.constant_cost)
        fitted, pool, measured, scatter = None, DEFAULT_POOL, {}, []
    else:
        profile = load_profile(args.profile)
        cost, fitted = profile.cost_model(), profile.ranges()
        pool, measured = profile.num_blocks or DEFAULT_POOL, profile.overheads
        scatter = profile.step_scatter
    if args.pace != 1.0:
        cost = ScaledCost(cost, args.pace)
    settings = replay_settings(serve, SimSettings(**given(args, SimSettings)), pool, measured)
    if scatter:
        settings["step_scatter"] = scatter
    return trace, (cost, fitted), settings


def _about(args, cost: CostModel, settings: dict) -> dict:
    """What a replay's results came from, written beside them."""
    return {"trace": str(args.trace), "load": load_options(args),
            "cost": {type(cost).__name__: asdict(cost)}, **settings}


def _replay_options(p: argparse.ArgumentParser) -> None:
    trace = p.add_mutually_exclusive_group(required=True)
    trace.add_argument("trace", nargs="?", help="a trace in any format traces.load_trace reads: "
                       "native or Mooncake JSONL, Azure, BurstGPT or Vidur CSV (told from the file)")
    trace.add_argument("--trace", dest="trace_option", metavar="TRACE", help="the same, as an option")
    add_load_options(p.add_argument_group("loading the trace (as in python -m traces convert)"))
    cost = p.add_mutually_exclusive_group()
    cost.add_argument("--profile", default=CPU_SMOLLM2,
                      help="cost profile: a JSON path or a shipped name; the pool of the server "
                           f"it was measured on is the replay's (default: {CPU_SMOLLM2})")
    cost.add_argument("--constant-cost", type=float, metavar="S",
                      help=f"every step takes S seconds; the pool: --num-blocks, else {DEFAULT_POOL}")
    p.add_argument("--pace", type=positive, default=1.0, metavar="F",
                   help="every step F times its price: a host running F times as slow as where "
                        "the profile was measured (python -m analysis price-check reads it)")
    add_flags(p.add_argument_group("the server's settings (python -m live serve's, with its "
                                   "defaults)"), ServeSettings, scoped(SHARED))
    add_flags(p.add_argument_group("the simulator's own"), SimSettings)
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar (there is none either when stderr is not a terminal)")


def parser() -> OneLineErrors:
    parser = OneLineErrors(prog="python -m sim", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("replay", help="replay a trace and print its summary")
    _replay_options(p)
    p.add_argument("--out", help="write outcomes.parquet (a row per request, in the order "
                   "the requests ended, as traces.outcome.read_outcomes reads it), summary.json, "
                   "setup.json, timeseries.npy (a row a step: np.load(path)[\"tokens\"]) here, "
                   "as the replay goes")
    p.add_argument("--no-token-times", action="store_true",
                   help="leave every token's time out of outcomes.parquet (nearly all of its "
                   "size); the summary stays exact, as it is computed from the replay, not the file")
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
