"""`python -m analysis calibrate|compare|twin`: measure how far the simulator is
from the live server on the same trace."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim import load_profile
from traces import SAMPLES_DIR, load_trace

from .calibrate import cached_profile_path, calibrate
from .compare import compare
from .plots import write_plots
from .report import rows, text_table, write_report
from .serve_options import ServeOptions

DEFAULT_TRACE = SAMPLES_DIR / "mixed.jsonl"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


def _serve_options(p: argparse.ArgumentParser) -> None:
    d = ServeOptions()
    g = p.add_argument_group("the server (the same settings drive the simulator)")
    g.add_argument("--model", default=d.model, help="HF directory or .gguf; none: the embedded SmolLM2")
    g.add_argument("--device", default=d.device, choices=["cpu", "cuda"])
    g.add_argument("--dtype", default=d.dtype, choices=["float32", "bfloat16"])
    g.add_argument("--threads", type=int, default=d.threads, help="torch threads in the server")
    g.add_argument("--max-batch", type=int, default=d.max_batch)
    g.add_argument("--num-blocks", type=int, default=d.num_blocks)
    g.add_argument("--block-size", type=int, default=d.block_size)
    g.add_argument("--max-waiting", type=int, default=d.max_waiting)
    g.add_argument("--policy", default=d.policy)
    g.add_argument("--max-queued", type=int, default=d.max_queued)
    g.add_argument("--stall-timeout-s", type=float, default=d.stall_timeout_s)
    p.add_argument("--out", type=Path, default=Path("runs/twin"), help="where reports go")


def _options(args) -> ServeOptions:
    return ServeOptions(model=args.model, device=args.device, dtype=args.dtype,
                        threads=args.threads, max_batch=args.max_batch, num_blocks=args.num_blocks,
                        block_size=args.block_size, max_waiting=args.max_waiting,
                        policy=args.policy, max_queued=args.max_queued,
                        stall_timeout_s=args.stall_timeout_s)


def run_calibrate(args) -> int:
    _, path = calibrate(_options(args), args.out)
    print(f"profile written to {path}")
    return 0


def run_compare(args) -> int:
    options = _options(args)
    trace = load_trace(args.trace)
    if args.profile:
        profile = load_profile(args.profile)
    else:
        cached = cached_profile_path(options, Path(options.model).stem if options.model else EMBEDDED_NAME)
        if cached.exists() and not args.recalibrate:
            print(f"using the profile measured earlier on this machine: {cached}")
            profile = load_profile(cached)
        else:
            profile, _ = calibrate(options, args.out)
    comparison = compare(trace, profile, options, args.out)
    table = rows(comparison)
    plots = write_plots(comparison, args.out)
    header = (f"Trace `{args.trace}` ({len(trace)} requests); model {profile.model} on "
              f"{profile.hardware}, {profile.dtype}; max batch {options.max_batch}, policy "
              f"{options.policy}. Profile fitted on {profile.steps} steps (held-out MAPE "
              f"{profile.fit['mape']:.1%}).")
    report = write_report(comparison, table, args.out, header, plots)
    print()
    print(text_table(table))
    print(f"\nreport: {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("calibrate", help="serve, drive, fit a step-cost profile")
    _serve_options(p)
    p.set_defaults(func=run_calibrate)
    for name, help_text, recalibrate in (
            ("compare", "replay a trace live and simulated and report the difference", False),
            ("twin", "calibrate on this machine, then compare (the main job)", True)):
        p = commands.add_parser(name, help=help_text)
        _serve_options(p)
        p.add_argument("--trace", default=str(DEFAULT_TRACE), help="any format traces reads")
        p.add_argument("--profile", help="a profile JSON; none: calibrate here (cached)")
        p.set_defaults(func=run_compare, recalibrate=recalibrate)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
