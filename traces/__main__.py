"""The command line: `python -m traces generate|sessions|convert|stats ...`.

    python -m traces generate --rate 2 --count 40 --prompt-len uniform:8:400 \\
        --output-len uniform:8:64 --seed 1 -o calibration.jsonl
    python -m traces sessions --users 8 --turns 4 --think-s 2 --history -o chat.jsonl
    python -m traces convert AzureLLMInferenceTrace_conv.csv --limit 200 -o azure.jsonl
    python -m traces convert AzureLLMInferenceTrace_conv.csv --keys 100 --key-skew 1.2 \\
        -o keyed.jsonl
    python -m traces stats calibration.jsonl

A mistake in the arguments or the input file is reported in one line, with a
non-zero exit status, never a traceback.
"""
from __future__ import annotations

import argparse
import sys

from .synthetic.client_mix import ClientMix
from .synthetic.conversations import conversations
from .synthetic.generate import generate
from .jsonl import write_trace
from .synthetic.lengths import SPECS, parse_lengths
from .load import load_trace
from .load_options import add_load_options, load_options
from .record import LeaveHow
from .shaping import assign_keys, shape
from .stats import format_stats, trace_stats


def _add_key_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keys", type=int, metavar="N", help="give each request one of N API keys, "
                   "key-0 to key-<N-1>, drawn Zipf-like (seeded by --seed): a few heavy users")
    p.add_argument("--key-skew", type=float, metavar="S",
                   help="with --keys: key-i's weight is 1/(i+1)^S; 0 spreads them evenly "
                        "(default 1.0)")


def _keyed(requests: list, args: argparse.Namespace) -> list:
    """The requests with keys, if --keys asks for them."""
    if args.keys is None:
        if args.key_skew is not None:
            raise ValueError("--key-skew applies only with --keys")
        return requests
    skew = 1.0 if args.key_skew is None else args.key_skew
    return assign_keys(requests, args.keys, skew, args.seed or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m traces", description="Make, convert and "
                                     "summarise request traces (native JSONL, one request a line).")
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="a synthetic trace")
    gen.add_argument("--rate", type=float, required=True, help="mean arrivals per second")
    size = gen.add_mutually_exclusive_group(required=True)
    size.add_argument("--count", type=int, help="number of requests")
    size.add_argument("--duration-s", type=float, help="all arrivals in this many seconds")
    gen.add_argument("--arrivals", choices=["poisson", "gamma"], default="poisson")
    gen.add_argument("--cv", type=float, help="gamma: coefficient of variation of the gaps (>1 bursty)")
    _add_request_options(gen)

    talk = commands.add_parser("sessions", help="a closed-loop trace: virtual users, each "
                               "sending its next request a think time after it was done with "
                               "the one before")
    talk.add_argument("--users", type=int, required=True, help="sessions running at once")
    talk.add_argument("--turns", type=int, required=True, help="requests of each session")
    talk.add_argument("--think-s", type=float, default=0.0,
                      help="from a client done with a request to its next one (default 0)")
    talk.add_argument("--ramp-s", type=float, default=0.0,
                      help="users start at random in this many seconds (default: all at 0)")
    talk.add_argument("--history", action="store_true",
                      help="each turn's prompt carries the turns before it (multi-turn chat)")
    _add_request_options(talk)

    convert = commands.add_parser("convert", help="a public trace (or a native one) to native JSONL")
    convert.add_argument("input")
    convert.add_argument("-o", "--output", required=True, help="the JSONL file to write")
    add_load_options(convert)
    _add_key_options(convert)

    stats = commands.add_parser("stats", help="a summary table of a trace in any format")
    stats.add_argument("input")
    add_load_options(stats)
    return parser


def _add_request_options(p: argparse.ArgumentParser) -> None:
    """What a generated request asks for and how its client reads, and the output."""
    p.add_argument("--prompt-len", default="fixed:64", metavar="SPEC", help=SPECS)
    p.add_argument("--output-len", default="fixed:64", metavar="SPEC", help=SPECS)
    p.add_argument("--slow", type=float, default=0.0, help="fraction of slow readers")
    p.add_argument("--slow-pause-s", type=float, help="slow readers wait this long after each event")
    p.add_argument("--slow-bytes-per-s", type=float, help="slow readers read at this byte rate")
    p.add_argument("--leave", type=float, default=0.0, help="fraction of clients that leave early")
    p.add_argument("--leave-after-tokens", type=int, help="leavers leave after this many tokens")
    p.add_argument("--leave-after-s", type=float, help="leavers leave after this many seconds")
    p.add_argument("--leave-how", choices=[h.value for h in LeaveHow], help="fin (default) or rst")
    p.add_argument("--max-prompt-tokens", type=int, help="clamp prompt lengths to this")
    p.add_argument("--max-new-tokens", type=int, help="clamp output lengths to this")
    _add_key_options(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", required=True, help="the JSONL file to write")


def _requests_of(args: argparse.Namespace) -> dict:
    """`generate`'s and `conversations`' shared arguments, from the command line."""
    return {"prompt_lengths": parse_lengths(args.prompt_len, "prompt"),
            "output_lengths": parse_lengths(args.output_len, "output"),
            "clients": ClientMix(slow=args.slow, slow_pause_s=args.slow_pause_s,
                                 slow_bytes_per_s=args.slow_bytes_per_s, leave=args.leave,
                                 leave_after_tokens=args.leave_after_tokens,
                                 leave_after_s=args.leave_after_s,
                                 leave_how=LeaveHow(args.leave_how or "fin")),
            "seed": args.seed}


def _write_generated(requests: list, args: argparse.Namespace) -> None:
    requests = shape(requests, max_prompt_tokens=args.max_prompt_tokens,
                     max_new_tokens=args.max_new_tokens)
    requests = _keyed(requests, args)
    write_trace(args.output, requests)
    print(f"wrote {len(requests)} requests to {args.output}")


def _generate(args: argparse.Namespace) -> None:
    if args.arrivals == "gamma" and args.cv is None:
        raise ValueError("--arrivals gamma needs --cv")
    if args.arrivals == "poisson" and args.cv is not None:
        raise ValueError("--cv applies only to --arrivals gamma (Poisson gaps have cv 1)")
    _write_generated(generate(rate=args.rate, count=args.count, duration_s=args.duration_s,
                              cv=args.cv or 1.0, **_requests_of(args)), args)


def _sessions(args: argparse.Namespace) -> None:
    _write_generated(conversations(users=args.users, turns=args.turns, think_s=args.think_s,
                                   ramp_s=args.ramp_s, history=args.history,
                                   **_requests_of(args)), args)


def _convert(args: argparse.Namespace) -> None:
    requests = _keyed(load_trace(args.input, **load_options(args)), args)
    write_trace(args.output, requests)
    print(f"wrote {len(requests)} requests to {args.output}")


def _stats(args: argparse.Namespace) -> None:
    print(format_stats(trace_stats(load_trace(args.input, **load_options(args)))))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        {"generate": _generate, "sessions": _sessions, "convert": _convert,
         "stats": _stats}[args.command](args)
    except OSError as e:
        problem = f"{e.strerror}: {e.filename}" if e.filename else str(e)
        print(f"python -m traces {args.command}: error: {problem}", file=sys.stderr)
        return 1
    except ValueError as e:  # TraceError is one: a bad file or option, said in one line
        print(f"python -m traces {args.command}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
