"""The options every command that reads a trace shares (`python -m traces
convert|stats`, `python -m sim replay|sweep`): how `load_trace` picks, rescales
and clamps the requests of a file."""
from __future__ import annotations

import argparse

from .load import FORMATS

# (option, type, help): each one a keyword argument of load_trace.
_LOAD_OPTIONS = [
    ("--format", str, f"the input's format, when not detected: {', '.join(FORMATS)}"),
    ("--time-scale", float, "multiply inter-arrival times (0.5 = twice as fast)"),
    ("--start-s", float, "keep arrivals from this second of the trace (and start there)"),
    ("--end-s", float, "keep arrivals before this second of the trace"),
    ("--sample", float, "keep this fraction of the requests, chosen at random"),
    ("--seed", int, "seed for --sample and for --rate arrivals (default 0)"),
    ("--limit", int, "keep the first N requests"),
    ("--max-prompt-tokens", int, "clamp prompt lengths to this"),
    ("--max-new-tokens", int, "clamp output lengths to this"),
    ("--model", str, "BurstGPT: keep only this model (e.g. ChatGPT, GPT-4)"),
    ("--log-type", str, "BurstGPT: keep only this log type (e.g. 'Conversation log')"),
    ("--rate", float, "length-only Vidur files: Poisson arrivals at this rate (default: all at 0)"),
]


def add_load_options(p: argparse.ArgumentParser) -> None:
    for flag, kind, help_text in _LOAD_OPTIONS:
        p.add_argument(flag, type=kind, help=help_text)


def load_options(args: argparse.Namespace) -> dict:
    names = [flag[2:].replace("-", "_") for flag, _, _ in _LOAD_OPTIONS]
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}
