"""The step log marks the steps that chunk a prompt, so that a fit can tell its
error on them apart: a chunk that leaves its prompt unfinished, or one that goes
on over a prompt's cached start. Whole prompts, however many, are not chunked."""
import pytest

from live.engine.engine import Engine
from live.engine.step_log import StepLog
from live.runner.model_runner import ModelRunner
from scheduler import SchedulerConfig

from engine_helpers import ByteTokenizer, requests, run_engine
from tiny_models import tiny_llama


@pytest.mark.parametrize("chunk", [None, 4])
def test_a_step_is_chunked_only_if_a_chunk_leaves_or_continues_a_prompt(chunk):
    runner = ModelRunner(tiny_llama(), num_blocks=64, block_size=4, device="cpu")
    config = SchedulerConfig(num_blocks=64, block_size=4, max_batch=6, max_prefill_tokens=chunk,
                             chunked_prefill=chunk is not None)
    log = StepLog()
    engine = Engine(runner, ByteTokenizer(), config, step_log=log)
    run_engine(engine, {0: requests()[:3], 2: requests()[3:]})
    steps = log.after(0)
    chunked = [s["step"] for s in steps if s["chunked"]]
    if chunk is None:
        assert chunked == [] and any(s["num_prefills"] >= 2 for s in steps)
    else:
        # prompts of 6, 3 and 9 tokens at step 0 through chunks of 4: 4 | 2+2 | 1+3 | 4 | 2,
        # then 1, 5 and 2 tokens from step 2
        assert chunked and chunked == [s["step"] for s in steps
                                       if s["num_prefills"] and s["step"] <= chunked[-1]]
        assert not steps[-1]["chunked"] and steps[-1]["num_prefills"] == 0
    assert engine.core.is_drained()
