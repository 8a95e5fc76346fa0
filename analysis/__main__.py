"""`python -m analysis calibrate|compare|twin`: measure how far the simulator is
from the live server on the same trace."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import httpx

from live.server.engine_info import hardware_name
from sim import load_profile
from traces import SAMPLES_DIR, load_trace

from .calibrate import cached_profile_path, calibrate
from .compare import compare
from .live_target import LiveTarget
from .plots import write_plots
from .report import rows, text_table, write_report
from .serve_options import BadServeOptions, ServeOptions
from .server_info import SettingsDisagree

DEFAULT_TRACE = SAMPLES_DIR / "mixed.jsonl"


def _serve_options(p: argparse.ArgumentParser) -> None:
    d = ServeOptions()
    p.add_argument("--url", help="a server already running (http://host:port[/prefix]): none is "
                                 "started, its settings are read from it, and serve flags "
                                 "given must agree with them")
    g = p.add_argument_group("the server to start (the same settings drive the simulator)")
    # Unset flags stay absent, so that with --url only those given are checked.
    unset = argparse.SUPPRESS
    g.add_argument("--model", default=unset,
                   help="HF directory or .gguf (default: the embedded SmolLM2)")
    g.add_argument("--device", default=unset, choices=["cpu", "cuda"], help=f"(default: {d.device})")
    g.add_argument("--dtype", default=unset, choices=["float32", "bfloat16"],
                   help=f"(default: {d.dtype})")
    g.add_argument("--threads", type=int, default=unset,
                   help=f"torch threads in the server (default: {d.threads})")
    for name, kind in (("max_batch", int), ("num_blocks", int), ("block_size", int),
                       ("max_waiting", int), ("max_prefill_tokens", int), ("admission", str),
                       ("policy", str), ("max_queued", int), ("stall_timeout_s", float)):
        g.add_argument(f"--{name.replace('_', '-')}", type=kind, default=unset,
                       help=f"(default: {getattr(d, name)})")
    g.add_argument("--gpu-memory-fraction", type=float, default=unset, metavar="F",
                   help="on CUDA: size the KV pool from this share of the GPU's memory, "
                        "instead of --num-blocks")
    g.add_argument("--chunked-prefill", action="store_true", default=unset,
                   help="cut prompts into chunks of --max-prefill-tokens, prefilled a step at a "
                        "time beside the decodes")
    g.add_argument("--eager", action="store_true", default=unset,
                   help="on CUDA: decode eagerly rather than from CUDA graphs")
    p.add_argument("--out", type=Path, default=Path("runs/twin"), help="where reports go")


def _server(args) -> ServeOptions | str:
    """The settings to start a server with, or the URL of one running whose
    settings agree with every serve flag given."""
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(ServeOptions)
             if hasattr(args, f.name)}
    if args.url is None:
        if "gpu_memory_fraction" in flags:
            flags.setdefault("num_blocks", None)  # the fraction sizes the pool
        return ServeOptions(**flags)
    with LiveTarget(args.url) as target:
        disagree = target.info.disagreements(flags)
    if disagree:
        raise SettingsDisagree(f"the server at {args.url} does not run what was asked: "
                               + "; ".join(disagree))
    return args.url


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def _calibration_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration-time-scale", type=_positive, default=1.0, metavar="F",
                   help="multiply the calibration workload's arrival times by F (below 1 for "
                   "servers much faster than a small model on a CPU, e.g. 0.25 on a GPU)")


def _profile_key(server: ServeOptions | str) -> tuple[str, str, str]:
    """The hardware, model and dtype a cached profile of `server` is named after."""
    if isinstance(server, str):
        with LiveTarget(server) as target:
            return target.info.hardware, target.info.model, target.info.dtype
    return hardware_name(server.device), server.model_name, server.dtype


def run_calibrate(args) -> int:
    _, path = calibrate(_server(args), args.out, time_scale=args.calibration_time_scale)
    print(f"profile written to {path}")
    return 0


def run_compare(args) -> int:
    server = _server(args)
    trace = load_trace(args.trace)
    if args.profile:
        profile = load_profile(args.profile)
    else:
        cached = cached_profile_path(*_profile_key(server))
        if cached.exists() and not args.recalibrate:
            print(f"using the profile measured earlier on this hardware: {cached}")
            profile = load_profile(cached)
        else:
            profile, _ = calibrate(server, args.out, time_scale=args.calibration_time_scale)
    comparison = compare(trace, profile, server, args.out)
    table = rows(comparison)
    plots = write_plots(comparison, args.out)
    info = comparison.server
    header = (f"Trace `{args.trace}` ({len(trace)} requests); model {info.model} on "
              f"{info.hardware}, {info.dtype}; max batch {info.scheduler['max_batch']}, policy "
              f"{info.policy['name']}. Profile fitted on {profile.steps} steps (held-out MAPE "
              f"{profile.fit['mape']:.1%}) on {profile.hardware}.")
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
    _calibration_options(p)
    p.set_defaults(func=run_calibrate)
    for name, help_text, recalibrate in (
            ("compare", "replay a trace live and simulated and report the difference", False),
            ("twin", "calibrate on this machine, then compare (the main job)", True)):
        p = commands.add_parser(name, help=help_text)
        _serve_options(p)
        p.add_argument("--trace", default=str(DEFAULT_TRACE), help="any format traces reads")
        p.add_argument("--profile", help="a profile JSON; none: calibrate here (cached)")
        _calibration_options(p)
        p.set_defaults(func=run_compare, recalibrate=recalibrate)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (SettingsDisagree, BadServeOptions) as exc:
        print(f"python -m analysis: {exc}", file=sys.stderr)
        return 2
    except httpx.HTTPError as exc:
        print(f"python -m analysis: the server did not answer as expected: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
