"""A request fails alone: a step whose model run raises is run again one sequence
at a time, so that only the sequence that fails alone ends with `error` and every
other one makes the tokens an undisturbed run makes; a failure outside the model
(the detokenizer, the core's commit) ends the step's sequences, not the engine;
and an engine that cannot go on says so instead of stepping on."""
import threading

import pytest

from live.engine.engine import EngineBroken
from live.engine.step_loop import StepLoop
from scheduler import FinishReason, InvariantBroken

from engine_helpers import run_engine
from live_server import FaultyRunner, culprit, first_run_of_step, in_chunk, tiny_engine

PROMPTS = {"a": [1, 2, 3, 4, 5], "b": [6, 7, 8], "c": [9, 10, 11, 12, 13, 14, 15]}
NEW = 8


def arrivals(prompts=PROMPTS):
    return {0: [(seq_id, ids, NEW) for seq_id, ids in prompts.items()]}


def run(fails=None, prompts=PROMPTS, **options):
    wrap = None if fails is None else (lambda runner: FaultyRunner(runner, fails))
    engine, _ = tiny_engine(runner_wrapper=wrap, **options)
    tokens, _, finished = run_engine(engine, arrivals(prompts))
    assert engine.core.is_drained()
    inner = getattr(engine.runner, "runner", engine.runner)
    assert inner.sampler.generators_held == 0
    return engine, tokens, finished


def test_only_the_sequence_that_fails_alone_ends_with_an_error():
    _, undisturbed, _ = run()
    engine, tokens, finished = run(culprit("b", from_token=3))
    assert finished["b"].reason is FinishReason.ERROR and tokens["b"] == undisturbed["b"][:3]
    for seq_id in ("a", "c"):
        assert finished[seq_id].reason is FinishReason.LENGTH
        assert tokens[seq_id] == undisturbed[seq_id]
    assert engine.core.finished_by_reason[FinishReason.ERROR] == 1


def test_a_step_that_fails_once_as_a_whole_loses_nothing():
    _, undisturbed, _ = run()
    engine, tokens, finished = run(first_run_of_step(3))
    assert engine.runner.failures == 1
    assert tokens == undisturbed
    assert {e.reason for e in finished.values()} == {FinishReason.LENGTH}


def test_a_chunk_that_fails_ends_its_prompt_alone():
    prompts = {**PROMPTS, "long": list(range(20, 60))}  # 40 tokens: chunks of 8
    chunked = dict(max_prefill_tokens=8, chunked_prefill=True)
    _, undisturbed, _ = run(prompts=prompts, **chunked)
    engine, tokens, finished = run(in_chunk("long"), prompts=prompts, **chunked)
    assert finished["long"].reason is FinishReason.ERROR and "long" not in tokens
    for seq_id in PROMPTS:
        assert finished[seq_id].reason is FinishReason.LENGTH
        assert tokens[seq_id] == undisturbed[seq_id]


def test_a_detokenizer_that_raises_ends_that_sequence_alone():
    engine, _ = tiny_engine()
    decode = engine.tokenizer.decode

    class Picky:
        def decode(self, ids, skip_special_tokens=True):
            if 99 in ids:
                raise ValueError("cannot decode 99")
            return decode(ids)

    engine.tokenizer = Picky()
    tokens, texts, finished = run_engine(engine, {0: [("ok", [1, 2, 3], NEW),
                                                      ("bad", [4, 5, 99], NEW)]})
    assert finished["bad"].reason is FinishReason.ERROR
    assert finished["ok"].reason is FinishReason.LENGTH and len(tokens["ok"]) == NEW
    assert engine.core.is_drained()


def test_a_commit_that_raises_ends_its_step_and_the_engine_goes_on(monkeypatch):
    engine, _ = tiny_engine()
    commit = engine.core.commit
    calls = []

    def commit_once_broken(plan, tokens, ends=None):
        calls.append(plan.index)
        if len(calls) == 2:
            raise InvariantBroken("injected")
        return commit(plan, tokens, ends)

    monkeypatch.setattr(engine.core, "commit", commit_once_broken)
    _, _, finished = run_engine(engine, arrivals())
    assert {e.reason for e in finished.values()} == {FinishReason.ERROR}
    assert engine.core.is_drained()
    tokens, _, finished = run_engine(engine, {0: [("later", [1, 2], NEW)]})
    assert finished["later"].reason is FinishReason.LENGTH and len(tokens["later"]) == NEW
    assert engine.core.is_drained()


def test_an_engine_whose_planning_raises_is_broken(monkeypatch):
    engine, _ = tiny_engine()
    engine.submit("a", [1, 2, 3], NEW)
    engine.step()

    def broken():
        raise KeyError("lost track")

    monkeypatch.setattr(engine.core, "plan", broken)
    with pytest.raises(EngineBroken):
        engine.step()


def test_commits_that_keep_failing_break_the_engine(monkeypatch):
    engine, _ = tiny_engine()

    def broken(plan, tokens, ends=None):
        raise InvariantBroken("always")

    monkeypatch.setattr(engine.core, "commit", broken)
    with pytest.raises(EngineBroken):
        for n in range(10):
            engine.submit(f"r{n}", [1, 2, 3], NEW)
            engine.step()


def test_a_step_loop_whose_engine_breaks_stops_and_says_so(monkeypatch):
    engine, _ = tiny_engine()
    halted = threading.Event()
    reasons = []

    def on_halt(exc):
        reasons.append(exc)
        halted.set()

    loop = StepLoop(engine, lambda output: None, on_halt=on_halt)

    def broken():
        raise KeyError("lost track")

    monkeypatch.setattr(engine.core, "plan", broken)
    loop.start()
    engine.submit("a", [1, 2, 3], NEW)
    assert halted.wait(30)
    assert isinstance(reasons[0], EngineBroken) and not loop.alive
    loop.stop()
