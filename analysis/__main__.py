"""`python -m analysis calibrate|compare|twin|validate|price-check|study`: measure
how far the simulator is from the live server on the same trace, over a matrix of
settings and traces, and on the questions of the studies; and how fast the host
runs today against its profile."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

from scheduler.flags import OneLineErrors, add_flags, given, positive
from scheduler.settings import SERVER, SHARED, ServeSettings, scoped
from sim import Profile, load_profile, pace
from sim.fit import FitReport
from traces import SAMPLES_DIR, load_trace

from .calibrate import cached_profile_path, calibrate, measured_profile, profile_key
from .compare import Comparison, compare
from .live_target import Access, LiveTarget, live_target
from .plots import write_plots
from .price_check import price_check
from .report import rows, text_table, write_report
from .server_info import SettingsDisagree
from .study.bench import Bench, Skipped, markdown_table, write_study
from .study.catalog import STUDIES, runs
from .validate.matrix import QUICK, SETTINGS as VALIDATE_SETTINGS, TRACES, cells
from .validate.report import markdown, tally, write_validation
from .validate.run import rejudge, validate

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


def _calibration_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration-time-scale", type=positive, default=1.0, metavar="F",
                   help="multiply the arrival times of the calibration's mixed phase by F "
                   "(below 1 for servers much faster than a small model on a CPU, e.g. 0.25 "
                   "on a GPU)")


def run_calibrate(args, server: ServeSettings | str, access: Access) -> int:
    _, path = calibrate(server, args.out, time_scale=args.calibration_time_scale, access=access)
    print(f"profile written to {path}")
    return 0


def run_compare(args, server: ServeSettings | str, access: Access) -> int:
    trace = load_trace(args.trace)
    if args.profile:
        profile = load_profile(args.profile)
    else:
        profile = measured_profile(server, args.out, recalibrate=args.recalibrate,
                                   time_scale=args.calibration_time_scale, access=access)
    comparison = compare(trace, profile, server, args.out, access=access)
    table = rows(comparison)
    plots = write_plots(comparison, args.out)
    info = comparison.server
    header = (f"Trace `{args.trace}` ({len(trace)} requests); model {info.model} on "
              f"{info.hardware}, {info.dtype}; max batch {info.scheduler['max_batch']}, policy "
              f"{info.settings['policy']}. {_fitted(profile)}")
    beyond = [b.describe() for b in comparison.beyond_fit]
    if beyond:
        header += " Beyond the fit: " + "; ".join(beyond) + "."
    paced = _paced(comparison, profile)
    header += f" {paced}"
    report = write_report(comparison, table, args.out, header, plots)
    print()
    print(text_table(table))
    for line in beyond:
        print(f"beyond the profile's fit: {line}")
    print(f"\n{paced}\nreport: {report}")
    return 0


def _paced(comparison: Comparison, profile: Profile) -> str:
    """How fast the host ran the live replay's steps against the profile's prices."""
    if not comparison.steps:
        return "The live replay ran no step."
    return (f"The live replay's steps took {pace(comparison.steps, profile.cost_model()):.3f} "
            f"times the profile's price of the same steps (the host's pace against its "
            f"calibration: a pace away from 1 moves the live figures, not the simulated).")


def _fitted(profile: Profile) -> str:
    """What the profile was fitted on, and how well by kind of step."""
    fit = FitReport(**profile.fit)
    kinds = f"; by kind: {fit.describe_kinds()}" if fit.by_kind else ""
    return (f"Profile fitted on {profile.steps} steps on {profile.hardware} (held-out MAPE "
            f"{fit.mape:.1%}{kinds}).")


def run_validate(args, server: ServeSettings | str, access: Access) -> int:
    if args.live_from:
        if not args.profile:
            print("python -m analysis validate: --live-from judges the --profile given",
                  file=sys.stderr)
            return 2
        if args.out.resolve() == args.live_from.resolve():
            print("python -m analysis validate: --out must differ from --live-from (the live "
                  "runs' own judgement is kept there)", file=sys.stderr)
            return 2
        profile = load_profile(args.profile)
        verdicts = rejudge(args.live_from / "validate.json", profile)
        runs = f"the live runs recorded in {args.live_from}"
    else:
        matrix = cells(args.quick, args.trace, args.setting)
        if args.profile:
            profile = load_profile(args.profile)
        else:
            profile = measured_profile(server, args.out / "calibration",
                                       time_scale=args.calibration_time_scale, access=access)
        verdicts = validate(server, profile, matrix, args.runs, args.out, access=access)
        runs = f"{args.runs} live runs a cell"
    header = f"{profile.model}, {profile.dtype}, on {profile.hardware}; {runs}. {_fitted(profile)}"
    paths = write_validation(verdicts, args.out, header)
    print(f"\n{markdown(verdicts)}\n\n{tally(verdicts)}\nreport: {paths[0]}")
    return 0


def run_price_check(args, server: ServeSettings | str, access: Access) -> int:
    if args.profile:
        profile = load_profile(args.profile)
    else:
        cached = cached_profile_path(*profile_key(server, access))
        if not cached.exists():
            print(f"python -m analysis price-check: no profile measured on this hardware "
                  f"({cached}): give --profile, or run python -m analysis calibrate",
                  file=sys.stderr)
            return 2
        profile = load_profile(cached)
    cost = profile.cost_model()
    with live_target(server, args.out / "price-check-server.log", access) as target:
        paces = [pace(price_check(target, target.info.scheduler["max_model_len"]), cost)
                 for _ in range(args.checks)]
    median = statistics.median(paces)
    print(f"checks: {', '.join(f'{p:.3f}' for p in paces)}\n"
          f"The host runs at {median:.3f} times the prices of the profile measured on "
          f"{profile.hardware} (1.10: a tenth slower than at its calibration). A what-if at "
          f"today's speed: python -m sim replay TRACE --profile P --pace {median:.3f}")
    return 0


def run_study(args, server: ServeSettings, access: Access) -> int:
    """Each study asked (`all`: every one), into `--out` (with `all`, a folder each)."""
    try:
        chosen = runs(args.name, args.fill)
    except ValueError as exc:
        print(f"python -m analysis study: {exc}", file=sys.stderr)
        return 2
    root = args.out or Path("runs/study")
    if args.profile:
        profile = load_profile(args.profile)
    else:
        profile = measured_profile(server, root / "calibration",
                                   time_scale=args.calibration_time_scale)
    for name, study in chosen:
        out = root / name if args.out is None or len(chosen) > 1 else root
        started = time.monotonic()
        try:
            findings = study(Bench(server, profile, out))
        except Skipped as exc:
            print(f"{name}: skipped: {exc}")
            continue
        runtime = time.monotonic() - started
        path = write_study(name, findings, out, runtime)
        print(f"\n{findings.title}\n\n{markdown_table(findings.quantities)}\n")
        for note in findings.notes:
            print(f"* {note}")
        print(f"\n{name}: {runtime:.0f} s; report: {path}")
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
    p = commands.add_parser("study", help="one question about streaming, asked of a live "
                                          "server and of the simulator, against a reference")
    p.add_argument("name", choices=[*STUDIES, "all"])
    p.add_argument("--fill", action="store_true",
                   help="slow-reader: the batch full of slow readers, fast requests waiting")
    p.add_argument("--out", type=Path, help="where the study's files go; default "
                                            "runs/study/NAME")
    p.add_argument("--profile", help="a profile JSON; none: the one measured on this "
                                     "hardware (calibrated here if none is cached)")
    _calibration_options(p)
    # the study starts its own servers, with its own settings on top of these
    add_flags(p.add_argument_group("the servers to start (python -m live serve's settings; a "
                                   "study sets those it is about)"),
              ServeSettings, STARTED, absent_unless_given=True)
    p.set_defaults(func=run_study, url=None)
    p = commands.add_parser("price-check", help="the host's pace against a profile now: a "
                                                "short fixed load's steps over their prices")
    _serve_options(p)
    p.add_argument("--profile", help="a profile JSON; none: the one measured on this hardware")
    p.add_argument("--checks", type=int, choices=range(1, 11), default=3, metavar="N",
                   help="checks in a row, their median the pace (1 to 10; default 3)")
    p.set_defaults(func=run_price_check, out=Path("runs/price-check"))
    p = commands.add_parser("validate", help="one profile against a matrix of live runs: "
                                             "settings by traces, each run several times, "
                                             "the host's pace checked about each run")
    _serve_options(p)
    p.add_argument("--profile", help="a profile JSON; none: the one measured on this "
                                     "hardware (calibrated here if none is cached)")
    p.add_argument("--runs", type=int, default=3, help="live runs of each cell")
    p.add_argument("--quick", action="store_true",
                   help=f"only {', '.join(f'{t} × {s}' for t, s in QUICK)}")
    p.add_argument("--trace", action="append", choices=list(TRACES),
                   help="only these traces (repeat; default: all)")
    p.add_argument("--setting", action="append", choices=list(VALIDATE_SETTINGS),
                   help="only these settings (repeat; default: all)")
    p.add_argument("--live-from", type=Path, metavar="DIR",
                   help="run nothing live: judge --profile on the live runs a validation "
                        "recorded in DIR (its validate.json), each cell simulated again")
    _calibration_options(p)
    p.set_defaults(func=run_validate, out=Path("runs/validate"))
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
