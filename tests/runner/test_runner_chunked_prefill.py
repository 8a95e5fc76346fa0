"""Chunked prefill on the runner: a chunk that continues a prompt reads the
prompt's earlier tokens from the paged cache, so every logit is transformers'
own, and greedy tokens are those of an unchunked run, also across preemptions."""
import pytest

from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from scheduler import FinishReason, SchedulerConfig
from engine_helpers import ByteTokenizer, requests, run_engine
from tiny_models import BUILDERS, assert_rows_match_transformers, drive, make, prompt, request

ARRIVALS = {  # step -> (id, prompt length, new tokens)
    0: [("a", 5, 8), ("b", 19, 6)],
    1: [("c", 1, 9)],
    3: [("d", 33, 5), ("e", 7, 3)],
    6: [("f", 12, 4)],
}


def arrivals():
    return {step: [request(i, prompt(n, seed=len(i) + n), new) for i, n, new in reqs]
            for step, reqs in ARRIVALS.items()}


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("family", list(BUILDERS))
def test_chunked_logits_match_transformers_every_step(family, block_size):
    model = BUILDERS[family]()
    core, runner = make(model, block_size=block_size, max_prefill_tokens=7, chunked_prefill=True)
    seen = {"partials": 0, "continued": 0, "steps_with_all_three": 0}

    def execute(plan):
        logits = runner.forward_logits(plan)
        assert logits.shape == (len(plan.sequences), model.config.vocab_size)
        assert_rows_match_transformers(model, logits, plan.sequences)
        continued = [s for s in plan.chunks if s.prefill_start]
        seen["partials"] += len(plan.partials)
        seen["continued"] += len(continued)
        seen["steps_with_all_three"] += bool(
            continued and plan.decodes and any(not s.prefill_start for s in plan.chunks))
        return runner.sampler.sample(logits, plan.sequences)

    outputs = drive(core, runner, arrivals(), execute)

    # b (19), d (33) and f (12) are cut into chunks of at most 7
    assert seen["partials"] >= 2 + 4 + 1 and seen["continued"] >= 2 + 4 + 1
    assert seen["steps_with_all_three"] >= 1
    assert {i: len(t) for i, t in outputs.items()} == {
        i: new for reqs in ARRIVALS.values() for i, _, new in reqs}
    assert core.is_drained()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("budget", [1, 3, 8])
def test_greedy_tokens_are_those_of_an_unchunked_run(family, budget):
    model = BUILDERS[family]()
    whole = drive(*make(model), arrivals())
    chunked = drive(*make(model, max_prefill_tokens=budget, chunked_prefill=True), arrivals())
    assert chunked == whole


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_chunked_prefill_under_preemption_makes_the_tokens_made_alone(family):
    model = BUILDERS[family]()

    def engine_for(num_blocks, **scheduling):
        runner = ModelRunner(model, num_blocks=num_blocks, block_size=4, device="cpu")
        return Engine(runner, ByteTokenizer(), SchedulerConfig(
            num_blocks=num_blocks, block_size=4, max_batch=8, **scheduling))

    alone = {r[0]: run_engine(engine_for(64), {0: [r]})[0][r[0]] for r in requests()}
    engine = engine_for(16, admission="optimistic", max_prefill_tokens=5, chunked_prefill=True)
    tokens, texts, finished = run_engine(engine, {0: requests()})
    core = engine.core
    assert core.preemptions >= 3
    assert tokens == alone
    assert all(f.reason is FinishReason.LENGTH for f in finished.values())
    assert sum(f.recomputed_tokens for f in finished.values()) == core.recomputed_tokens > 0
    assert core.is_drained() and core.pool.reservations == core.pool.releases == 6 + core.preemptions
    assert engine.runner.sampler.generators_held == 0
    steps = engine.step_log.after(0)
    assert max(s["prefill_tokens"] for s in steps) <= 5
    assert sum(s["prefill_tokens"] for s in steps) == (
        sum(len(r[1]) for r in requests()) + core.recomputed_tokens)
