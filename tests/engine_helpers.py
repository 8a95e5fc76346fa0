"""Drive an Engine in the test's own thread: submit at chosen steps, step until
done, collect each request's tokens and finish."""
from __future__ import annotations

from live.engine.engine import Engine
from scheduler import FinishEvent, TokenEvent


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
