"""A server with no model in it, for measuring what the server itself costs per
open stream: the runner is a stand-in that answers every step with one token per
sequence at once, after a pause that grows with the batch (so that the events a
second stay within what one event loop writes, however many streams are open).
The tokenizer is the embedded SmolLM2's, so text and detokenizing are real.

    .venv/bin/python benchmarks/instant_model.py --port P [--streams N] [--http2] [--engine-process]
                                                 [--tokenizer DIR]
"""
from __future__ import annotations

import argparse
import functools
import logging
import sys
import time

from transformers import AutoTokenizer

from live import collector
from live.engine.engine import Engine
from live.runner.models import embedded_gguf, gguf_cache
from live.serve import place_engine
from live.server.app import create_app
from live.server.uvicorn_server import LiveServer
from live.server.validation import ServedModel
from scheduler import SchedulerConfig
from scheduler.settings import ServeSettings

CONTEXT = 4096
BLOCK_SIZE = 256
TEXT = ("The keeper of the lighthouse wrote down every ship that passed, every storm "
        "that came in from the west, and every letter that reached him by the boat.")


class InstantRunner:
    """The runner's interface with no model: tokens come from `token_ids` in turn."""

    eos_token_ids = frozenset()

    def __init__(self, token_ids: list[int], vocab_size: int, step_s: float,
                 per_sequence_s: float):
        self.token_ids = token_ids
        self.vocab_size = vocab_size
        self.step_s = step_s
        self.per_sequence_s = per_sequence_s
        self._next = 0

    def execute(self, plan) -> list[int]:
        count = len(plan.sequences)
        time.sleep(max(self.step_s, self.per_sequence_s * count))
        first, self._next = self._next, self._next + count
        return [self.token_ids[(first + i) % len(self.token_ids)] for i in range(count)]

    def forget(self, seq_id: str) -> None:
        pass


def build_engine(streams: int, step_s: float, per_sequence_s: float,
                 tokenizer_dir: str | None = None) -> tuple[Engine, ServedModel]:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or gguf_cache(embedded_gguf()))
    runner = InstantRunner(tokenizer.encode(TEXT), len(tokenizer), step_s, per_sequence_s)
    config = SchedulerConfig(num_blocks=streams * (CONTEXT // BLOCK_SIZE), block_size=BLOCK_SIZE,
                             max_batch=streams, max_waiting=streams, max_model_len=CONTEXT)
    served = ServedModel("instant", tokenizer, CONTEXT, runner.vocab_size)
    return Engine(runner, tokenizer, config), served


def build_app(streams: int, step_s: float, per_sequence_s: float, settings: ServeSettings,
              tokenizer_dir: str | None = None):
    build = functools.partial(build_engine, streams, step_s, per_sequence_s, tokenizer_dir)
    return create_app(*place_engine(build, settings), settings)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--streams", type=int, default=20_000, help="streams the engine runs at once")
    p.add_argument("--step-s", type=float, default=0.1, help="the shortest step")
    p.add_argument("--per-sequence-s", type=float, default=100e-6,
                   help="step time per sequence in the batch, when that is longer")
    p.add_argument("--http2", action="store_true")
    p.add_argument("--engine-process", action="store_true",
                   help="step the engine in a process of its own")
    p.add_argument("--tokenizer", help="a tokenizer's directory (default: the embedded SmolLM2's)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    settings = ServeSettings(port=args.port, http2=args.http2, max_batch=args.streams,
                             max_waiting=args.streams, engine_process=args.engine_process)
    app = build_app(args.streams, args.step_s, args.per_sequence_s, settings, args.tokenizer)
    collector.settle()
    LiveServer(app, "127.0.0.1", args.port, log_level="warning").run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
