"""`python -m analysis calibrate|compare|twin`: measure how far the simulator is
from the live server on the same trace."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx

from live.server.engine_info import hardware_name
from scheduler.flags import OneLineErrors, add_flags, given
from scheduler.settings import SERVER, SHARED, ServeSettings, scoped
from sim import load_profile
from traces import SAMPLES_DIR, load_trace

from .calibrate import cached_profile_path, calibrate
from .compare import compare
from .hardware import model_name
from .live_target import Access, LiveTarget
from .plots import write_plots
from .report import rows, text_table, write_report
from .server_info import SettingsDisagree

DEFAULT_TRACE = SAMPLES_DIR / "mixed.jsonl"
STARTED = scoped(SHARED, SERVER)
"""The settings of a server the analysis starts: all but its address, which it picks."""
KEY_SETTINGS = ("api_key", "api_keys_file", "admin_key")
"""With --url, how to reach the server rather than what it must run."""


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="a server already running (http://host:port[/prefix]): none is "
                                 "started, its settings are read from it, and serve flags "
                                 "given must agree with those it was started with")
    # Unset flags stay absent, so that with --url only those given are checked.
    add_flags(p.add_argument_group("the server to start (python -m live serve's settings, "
                                   "with its defaults; those it shares drive the simulator)"),
              ServeSettings, STARTED, absent_unless_given=True)
    p.add_argument("--out", type=Path, default=Path("runs/twin"), help="where reports go")


def _server(args) -> tuple[ServeSettings | str, Access]:
    """The settings to start a server with, or the URL of one running whose
    settings agree with every serve flag given; and the keys to reach it with (for
    a server running, the key flags say how to reach it, not what it runs)."""
    flags = given(args, ServeSettings, STARTED)
    if args.url is None:
        return ServeSettings(**flags), Access()  # a server started takes its keys from these
    access = Access.of(**{name: flags.pop(name) for name in KEY_SETTINGS if name in flags})
    with LiveTarget(args.url, access) as target:
        disagree = target.info.disagreements(flags)
    if disagree:
        raise SettingsDisagree(f"the server at {args.url} does not run what was asked: "
                               + "; ".join(disagree))
    return args.url, access


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def _calibration_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration-time-scale", type=_positive, default=1.0, metavar="F",
                   help="multiply the calibration workload's arrival times by F (below 1 for "
                   "servers much faster than a small model on a CPU, e.g. 0.25 on a GPU)")


def _profile_key(server: ServeSettings | str, access: Access) -> tuple[str, str, str]:
    """The hardware, model and dtype a cached profile of `server` is named after."""
    if isinstance(server, str):
        with LiveTarget(server, access) as target:
            return target.info.hardware, target.info.model, target.info.dtype
    return hardware_name(server.device), model_name(server.model), server.dtype


def run_calibrate(args, server: ServeSettings | str, access: Access) -> int:
    _, path = calibrate(server, args.out, time_scale=args.calibration_time_scale, access=access)
    print(f"profile written to {path}")
    return 0


def run_compare(args, server: ServeSettings | str, access: Access) -> int:
    trace = load_trace(args.trace)
    if args.profile:
        profile = load_profile(args.profile)
    else:
        cached = cached_profile_path(*_profile_key(server, access))
        if cached.exists() and not args.recalibrate:
            print(f"using the profile measured earlier on this hardware: {cached}")
            profile = load_profile(cached)
        else:
            profile, _ = calibrate(server, args.out, time_scale=args.calibration_time_scale,
                                   access=access)
    comparison = compare(trace, profile, server, args.out, access=access)
    table = rows(comparison)
    plots = write_plots(comparison, args.out)
    info = comparison.server
    header = (f"Trace `{args.trace}` ({len(trace)} requests); model {info.model} on "
              f"{info.hardware}, {info.dtype}; max batch {info.scheduler['max_batch']}, policy "
              f"{info.settings['policy']}. Profile fitted on {profile.steps} steps (held-out MAPE "
              f"{profile.fit['mape']:.1%}) on {profile.hardware}.")
    report = write_report(comparison, table, args.out, header, plots)
    print()
    print(text_table(table))
    print(f"\nreport: {report}")
    return 0


def parser() -> OneLineErrors:
    parser = OneLineErrors(prog="python -m analysis", description=__doc__)
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        try:
            server, access = _server(args)  # before anything starts
        except ValueError as exc:  # settings that cannot go together, or that a server does not run
            print(f"python -m analysis {args.command}: {exc}", file=sys.stderr)
            return 2
        return args.func(args, server, access)
    except httpx.HTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        hint = (" (a server with keys: give --admin-key, and --api-key or --api-keys-file)"
                if status in (401, 403) else "")
        print(f"python -m analysis {args.command}: the server did not answer as expected: "
              f"{str(exc).splitlines()[0]}{hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
