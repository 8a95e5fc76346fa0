"""Prefill passes behind a real uvicorn: in a step that admits a burst of prompts
beside a running stream's decode, the first prompts' first tokens are on their
streams while the step's last pass (the decode) has not run yet; every stream then
carries each token once, the tokens of an engine without passes, and the pool
ends whole with one step-log record for the step. Clients that leave while the
step runs end their streams as ever, and hold nothing."""
import json
import threading

import httpx

from live_server import (HeldRunner, RawStream, ToyTokenizer, engine_alone, running_server,
                         stats, tiny_app, wait_for, wait_idle)

TOK = ToyTokenizer()
PASS_TOKENS = 10
BURST = [("burst one", 1), ("burst two", 6), ("burst three", 6)]
"""Prompts of 9 to 11 tokens: a pass each. The first asks for one token only."""


class LastPassGate:
    """Holds any run that decodes beside prompts (a step's last pass) until opened."""

    def __init__(self, runner):
        self.runner = runner
        self.eos_token_ids = runner.eos_token_ids
        self.vocab_size = runner.vocab_size
        self.reached = threading.Event()
        self.opened = threading.Event()

    def execute(self, plan):
        if plan.prefills and plan.decodes:
            self.reached.set()
            assert self.opened.wait(20)
        return self.runner.execute(plan)

    def forget(self, seq_id):
        self.runner.forget(seq_id)


def gated_app():
    """(app, engine, held runner, gate): the held runner wraps the gate."""
    wrapped: list = []

    def wrap(runner):
        wrapped.append(LastPassGate(runner))
        wrapped.append(HeldRunner(wrapped[0]))
        return wrapped[1]
    app, engine = tiny_app(runner_wrapper=wrap, prefill_pass_tokens=PASS_TOKENS)
    return app, engine, wrapped[1], wrapped[0]


def burst_in_one_step(url: str, runner: HeldRunner, gate: LastPassGate):
    """A steady stream, then the burst admitted in one step beside its decode, that
    step held at its last pass: (steady, burst streams)."""
    steady = RawStream(url, "/v1/stream", {"prompt": "steady", "max_new_tokens": 40,
                                           "ignore_eos": True})
    steady.read_events(2)
    runner.hold_and_wait()  # a decode of the steady stream, planned before the burst
    burst = [RawStream(url, "/v1/stream", {"prompt": p, "max_new_tokens": n, "ignore_eos": True})
             for p, n in BURST]
    for stream in burst:
        assert stream.read_events(1)[0].event == "start"
    runner.release()
    assert gate.reached.wait(20)
    return steady, burst


def tokens_of(events) -> list[int]:
    return [json.loads(e.data)["token_id"] for e in events if e.event == "token"]


def test_a_first_token_reaches_its_stream_before_its_step_decodes():
    app, engine, runner, gate = gated_app()
    with running_server(app) as url:
        steady, burst = burst_in_one_step(url, runner, gate)
        first = burst[0].read_events(1)[-1]
        second = burst[1].read_events(1)[-1]
        # the step that made them has not committed: its last pass has not run
        seq = engine.core.sequence(burst[0].headers["x-request-id"])
        assert seq is not None and seq.output == []
        gate.opened.set()
        answers = [stream.read_to_end() for stream in burst]
        steady.read_to_end()
        after = wait_idle(url)
        steps = [json.loads(line) for line in httpx.get(url + "/v1/steps").text.splitlines()]

    for token in (first, second):
        assert token.event == "token" and json.loads(token.data)["index"] == 0
    for (prompt, new), events in zip(BURST, answers):
        alone, text, _ = engine_alone(TOK.encode(prompt), new)
        indexes = [json.loads(e.data)["index"] for e in events if e.event == "token"]
        assert indexes == list(range(new))  # each token once
        assert tokens_of(events) == alone
        assert "".join(json.loads(e.data)["text"] for e in events if e.event == "token") == text
        done = json.loads(events[-1].data)
        assert events[-1].event == "done" and done["finish_reason"] == "length"
        assert done["usage"]["completion_tokens"] == new
        assert done["timing"]["admitted"] <= done["timing"]["first_token"]
    burst_steps = [s for s in steps if s["num_prefills"] == len(BURST)]
    assert len(burst_steps) == 1
    assert burst_steps[0]["tokens"] == len(BURST) + 1 and burst_steps[0]["decode_batch"] == 1
    assert (after["blocks_reserved"], after["running"], after["waiting"]) == (0, 0, 0)
    assert engine.core.is_drained()


def test_clients_leaving_while_their_step_runs_hold_nothing():
    app, engine, runner, gate = gated_app()
    with running_server(app) as url:
        steady, burst = burst_in_one_step(url, runner, gate)
        burst[1].read_events(1)  # its first token came early: it leaves after it
        burst[1].reset()
        burst[2].reset()  # its first token comes with the last pass
        wait_for(lambda: stats(url)["streams_open"] == 2, what="the hub to close two streams")
        gate.opened.set()
        kept = burst[0].read_to_end()
        steady_events = steady.read_to_end()
        after = wait_idle(url)

    assert tokens_of(kept) == engine_alone(TOK.encode(BURST[0][0]), BURST[0][1])[0]
    assert tokens_of(steady_events) == engine_alone(TOK.encode("steady"), 40)[0]
    assert after["aborts"]["cancelled"] == 2
    assert (after["blocks_reserved"], after["running"], after["waiting"]) == (0, 0, 0)
    assert engine.core.is_drained()
