"""Drive an Engine in the test's own thread: submit at chosen steps, step until
done, collect each request's tokens and finish."""
from __future__ import annotations

from live.engine.engine import Engine
from live.runner.params import SamplingParams
from scheduler import FinishEvent, TokenEvent

NEW = 24
"""Tokens each of `requests()` asks for."""


def run_engine(engine: Engine, arrivals: dict[int, list[tuple]], max_steps: int = 10_000):
    """`arrivals` maps a step number to `(seq_id, prompt_ids, max_new_tokens, sampling)`
    tuples submitted just before that step. Returns (tokens, texts, finished) by id:
    `finished` holds the core's `FinishEvent`s."""
    tokens: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    finished: dict[str, FinishEvent] = {}
    last = max(arrivals, default=0)
    for n in range(max_steps):
        for args in arrivals.get(n, []):
            engine.submit(*args)
        if n > last and not engine.has_work():
            return tokens, texts, finished
        output = engine.step()
        for e in output.events:
            if isinstance(e, TokenEvent):
                tokens.setdefault(e.seq_id, []).append(e.token_id)
                texts[e.seq_id] = texts.get(e.seq_id, "") + output.deltas[e.seq_id]
            else:
                assert e.seq_id not in finished
                finished[e.seq_id] = e
                texts[e.seq_id] = texts.get(e.seq_id, "") + output.held[e.seq_id]
    raise AssertionError("engine did not finish")


class ByteTokenizer:
    """Token i is chr(65 + i % 26): enough for the engine's text path."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(65 + i % 26) for i in ids)


def requests():
    """Six requests of `NEW` tokens, greedy and seeded, as `run_engine` takes them."""
    sampled = SamplingParams(temperature=0.9, top_k=50, seed=11)
    return [("r0", [5, 9, 2, 7, 1, 3], NEW, SamplingParams()),
            ("r1", [4, 4, 8], NEW, SamplingParams()),
            ("r2", [12, 30, 2, 2, 9, 17, 3, 8, 1], NEW, sampled),
            ("r3", [7], NEW, SamplingParams()),
            ("r4", [21, 22, 23, 24, 25], NEW, SamplingParams(temperature=0.7, seed=3)),
            ("r5", [2, 3], NEW, SamplingParams())]
