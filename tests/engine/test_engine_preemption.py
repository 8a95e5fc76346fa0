"""Optimistic admission on a real (tiny, random) model: sequences preempted for
blocks are recomputed, prompt and output, and go on with the very tokens and text
they would have made alone; the pool is whole afterwards."""
import pytest

from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from scheduler import FinishReason, SchedulerConfig

from engine_helpers import NEW, ByteTokenizer, requests, run_engine
from tiny_models import tiny_gpt2, tiny_llama

BS = 4


def engine_for(model, num_blocks, admission):
    runner = ModelRunner(model, num_blocks=num_blocks, block_size=BS, device="cpu")
    return Engine(runner, ByteTokenizer(), SchedulerConfig(
        num_blocks=num_blocks, block_size=BS, max_batch=8, admission=admission))


@pytest.mark.parametrize("family", [tiny_gpt2, tiny_llama], ids=["gpt2", "llama"])
def test_preempted_sequences_make_the_tokens_they_make_alone(family):
    model = family()
    alone = {}
    for r in requests():
        tokens, texts, finished = run_engine(engine_for(model, 64, "reserve"), {0: [r]})
        alone[r[0]] = (tokens[r[0]], texts[r[0]])

    # 6 prompts need 8 blocks; their whole lengths 6 to 9 blocks each, 45 in all
    engine = engine_for(model, 16, "optimistic")
    tokens, texts, finished = run_engine(engine, {0: requests()})
    core = engine.core
    assert core.preemptions >= 3 and core.recomputed_tokens > 0
    for rid, (want_tokens, want_text) in alone.items():
        assert tokens[rid] == want_tokens, rid
        assert texts[rid] == want_text, rid
        assert (finished[rid].reason, finished[rid].num_generated) == (FinishReason.LENGTH, NEW)
    assert core.is_drained() and core.pool.reservations == core.pool.releases == 6 + core.preemptions
    # each request's end says how often it was preempted and what it cost
    assert sum(f.preemptions for f in finished.values()) == core.preemptions
    assert sum(f.recomputed_tokens for f in finished.values()) == core.recomputed_tokens
    assert all(f.recomputed_tokens > len(r[1]) for r in requests()
               if (f := finished[r[0]]).preemptions)
    assert engine.runner.sampler.generators_held == 0


def test_the_step_log_counts_a_recompute_as_prefill():
    engine = engine_for(tiny_llama(), 16, "optimistic")
    run_engine(engine, {0: requests()})
    steps = engine.step_log.after(0)
    prefilled = sum(s["prefill_tokens"] for s in steps)
    assert prefilled == sum(len(r[1]) for r in requests()) + engine.core.recomputed_tokens
