"""The engine and its step loop on a tiny random model: cancel and pause hold or
free blocks as the core says, the step log records every step, a failing step
ends its sequences with an error and leaks nothing."""
import json
import threading
import time

import pytest

from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from live.engine.step_log import StepLog
from live.engine.step_loop import StepLoop
from scheduler import FinishEvent, FinishReason, SchedulerConfig, TokenEvent

from engine_helpers import run_engine
from tiny_models import tiny_llama


class ByteTokenizer:
    """Enough of a tokenizer for the engine's text path: token i is chr(65 + i % 26)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(65 + i % 26) for i in ids)


@pytest.fixture
def engine(tmp_path):
    runner = ModelRunner(tiny_llama(), num_blocks=32, block_size=4, device="cpu")
    log = StepLog(str(tmp_path / "steps.jsonl"), device="cpu", meta={"model": "tiny-llama"})
    eng = Engine(runner, ByteTokenizer(), SchedulerConfig(num_blocks=32, block_size=4, max_batch=4),
                 step_log=log)
    yield eng
    log.close()


def test_cancel_and_pause_mid_run_hold_and_free_blocks(engine):
    core = engine.core
    engine.submit("a", [1, 2, 3, 4, 5], 20)   # ceil(25/4) = 7 blocks
    engine.submit("b", [6, 7, 8], 20)         # ceil(23/4) = 6 blocks
    engine.step()
    engine.step()
    assert core.pool.reserved_blocks == 13
    engine.pause("a")
    engine.step()
    assert core.snapshot().paused == 1 and core.pool.reserved_blocks == 13
    a_tokens = len(core.sequence("a").output)
    events = engine.step().events
    assert [e.seq_id for e in events if isinstance(e, TokenEvent)] == ["b"]
    assert len(core.sequence("a").output) == a_tokens
    engine.cancel("b")
    assert core.pool.reserved_blocks == 13  # only at the next boundary
    events = engine.step().events
    assert [(e.seq_id, e.reason) for e in events if isinstance(e, FinishEvent)] == [("b", FinishReason.CANCELLED)]
    assert core.pool.reserved_blocks == 7
    engine.resume("a")
    _, _, finished = run_engine(engine, {})
    assert finished["a"].reason is FinishReason.LENGTH and finished["a"].num_generated == 20
    assert core.is_drained()
    assert engine.runner.sampler.generators_held == 0


def test_step_log_records_every_executed_step(engine):
    run_engine(engine, {0: [("a", [1, 2, 3], 5)], 2: [("b", [4, 5, 6, 7, 8, 9], 3)]})
    engine.step_log.flush()
    lines = [json.loads(line) for line in open(engine.step_log.path)]
    assert [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    assert [(line["num_prefills"], line["prefill_tokens"], line["decode_batch"]) for line in lines[:4]] == [
        (1, 3, 0), (0, 0, 1), (1, 6, 1), (0, 0, 2)]
    assert lines[3]["context_tokens"] == (3 + 3) + (6 + 1)
    assert sum(line["tokens"] for line in lines) == 5 + 3
    assert all(line["duration_s"] > 0 and line["device"] == "cpu" and line["model"] == "tiny-llama"
               for line in lines)
    assert not any("device_s" in line for line in lines)  # measured on CUDA only


def test_step_log_carries_the_device_time_a_runner_measures(engine, monkeypatch):
    monkeypatch.setattr(engine.runner, "last_device_s", 0.00125, raising=False)
    run_engine(engine, {0: [("a", [1, 2, 3], 2)]})
    engine.step_log.flush()
    lines = [json.loads(line) for line in open(engine.step_log.path)]
    assert [line["device_s"] for line in lines] == [0.00125, 0.00125]
    assert engine.step_log.after(0)[0]["device_s"] == 0.00125


def test_step_log_tells_the_steps_cpu_time_from_its_waits(engine, monkeypatch):
    real = engine.runner.execute

    def waiting(plan):
        time.sleep(0.05)  # off the CPU, as a thread waiting for the interpreter lock is
        return real(plan)

    run_engine(engine, {0: [("a", [1, 2, 3], 2)]})
    monkeypatch.setattr(engine.runner, "execute", waiting)
    run_engine(engine, {0: [("b", [4, 5], 2)]})
    engine.step_log.flush()
    lines = [json.loads(line) for line in open(engine.step_log.path)]
    assert len(lines) == 4
    assert all(0 < line["cpu_s"] <= line["duration_s"] + 1e-3 for line in lines)
    assert all(line["duration_s"] - line["cpu_s"] >= 0.045 for line in lines[2:])


def test_failing_step_ends_its_sequences_with_error_and_leaks_nothing(engine, monkeypatch):
    engine.submit("a", [1, 2, 3], 10)
    engine.step()
    engine.submit("b", [4, 5], 10)
    real = engine.runner.execute

    def broken(plan):
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine.runner, "execute", broken)
    assert engine.step().is_empty
    monkeypatch.setattr(engine.runner, "execute", real)
    events = engine.step().events
    assert {(e.seq_id, e.reason) for e in events if isinstance(e, FinishEvent)} == {
        ("a", FinishReason.ERROR), ("b", FinishReason.ERROR)}
    assert engine.core.is_drained()


def test_step_loop_delivers_batches_and_sleeps_when_idle(engine):
    batches = []
    done = threading.Event()

    def deliver(output):
        batches.append(output)
        if any(isinstance(e, FinishEvent) for e in output.events):
            done.set()

    loop = StepLoop(engine, deliver)
    loop.start()
    engine.submit("a", [1, 2, 3], 6)
    assert done.wait(30)
    steps_when_done = engine.core.snapshot().step
    # idle: the loop waits on the inbox instead of planning empty steps
    assert not engine.core.inbox.wait(timeout=0.3)
    assert engine.core.snapshot().step == steps_when_done
    engine.submit("b", [1, 2], 2)
    engine.pause("b")  # all paused: nothing can run, and the loop must not spin
    threading.Event().wait(0.3)
    stalled = engine.core.snapshot().step
    threading.Event().wait(0.3)
    assert engine.core.snapshot().step == stalled
    engine.cancel("b")
    for _ in range(300):
        if engine.core.is_drained():
            break
        threading.Event().wait(0.01)
    loop.stop()
    assert not loop.alive
    assert engine.core.is_drained()
    tokens = [e.token_id for batch in batches for e in batch.events
              if isinstance(e, TokenEvent) and e.seq_id == "a"]
    assert len(tokens) == 6 and all(not b.is_empty for b in batches)
