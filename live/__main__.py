"""`python -m live serve …` and `python -m live replay …`."""
from __future__ import annotations

import logging
import sys

from scheduler.flags import OneLineErrors, add_flags, given
from scheduler.settings import ServeSettings

from .client.loadgen import add_parser as add_replay_parser


def add_serve_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a model over HTTP (SSE, OpenAI, Anthropic)")
    add_flags(p, ServeSettings)
    p.set_defaults(func=run_serve)


def run_serve(args) -> int:
    from .server.access import KeyRing

    try:
        settings = ServeSettings(**given(args, ServeSettings))
        keys = KeyRing.load(settings)
    except ValueError as exc:
        print(f"python -m live serve: {exc}", file=sys.stderr)
        return 2
    from .serve import serve  # the model stack loads to serve, not to refuse or to help

    return serve(settings, keys)


def parser() -> OneLineErrors:
    parser = OneLineErrors(prog="python -m live")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(subparsers)
    add_replay_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
