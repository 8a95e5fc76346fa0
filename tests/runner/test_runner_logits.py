"""The runner's own forward over the paged cache gives transformers' logits, at
prefill and at every decode step, for batches of sequences of different lengths
that arrive at different steps and span several blocks."""
import pytest
import torch

from live.runner.model_runner import ModelRunner
from scheduler import Scheduler, SchedulerConfig
from tiny_models import BUILDERS, assert_rows_match_transformers, drive, make, prompt, request

ARRIVALS = {  # step -> (id, prompt length, new tokens)
    0: [("a", 5, 8), ("b", 19, 6)],
    1: [("c", 1, 9)],
    3: [("d", 33, 5), ("e", 7, 3)],
    6: [("f", 12, 4)],
}


@pytest.mark.parametrize("block_size", [4, 16])
@pytest.mark.parametrize("family", list(BUILDERS))
def test_logits_match_transformers_every_step(family, block_size):
    model = BUILDERS[family]()
    core, runner = make(model, block_size=block_size)
    arrivals = {step: [request(i, prompt(n, seed=len(i) + n), new) for i, n, new in reqs]
                for step, reqs in ARRIVALS.items()}
    checked = {"prefill": 0, "decode": 0, "mixed_steps": 0}

    def execute(plan):
        logits = runner.forward_logits(plan)
        seqs = plan.prefills + plan.decodes
        assert logits.shape == (len(seqs), model.config.vocab_size)
        assert_rows_match_transformers(model, logits, seqs)
        checked["prefill"] += len(plan.prefills)
        checked["decode"] += len(plan.decodes)
        checked["mixed_steps"] += bool(plan.prefills and plan.decodes)
        return runner.sampler.sample(logits, seqs)

    outputs = drive(core, runner, arrivals, execute)

    total_new = sum(new for reqs in ARRIVALS.values() for _, _, new in reqs)
    assert checked["prefill"] == 6 and checked["decode"] == total_new - 6
    assert checked["mixed_steps"] >= 2
    assert {i: len(t) for i, t in outputs.items()} == {
        i: new for reqs in ARRIVALS.values() for i, _, new in reqs}
    assert core.is_drained()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_execute_is_forward_logits_then_greedy(family):
    """`execute` samples the very logits `forward_logits` returns."""
    model = BUILDERS[family]()
    core, runner = make(model)
    core.submit(request("a", prompt(6, 1), 2))
    core.submit(request("b", prompt(3, 2), 2))
    plan = core.plan()
    logits = runner.forward_logits(plan)
    assert runner.execute(plan) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_bfloat16_stays_close_to_float32(family):
    """The dtype paths (norms in float32, bf16 cache and attention) hold together:
    bf16 logits within a few percent of transformers' float32 ones."""
    model = BUILDERS[family]()
    core = Scheduler(SchedulerConfig(num_blocks=32, block_size=4))
    runner = ModelRunner(model, num_blocks=32, block_size=4, dtype=torch.bfloat16)
    worst = []

    def execute(plan):
        logits = runner.forward_logits(plan)
        assert logits.dtype == torch.bfloat16
        for row, seq in zip(logits, plan.sequences):
            with torch.inference_mode():
                expected = model(torch.tensor([list(seq.request.payload.prompt_ids) + seq.output]))
            expected = expected.logits[0, -1]
            worst.append(((row.float() - expected).abs().max() / expected.abs().max()).item())
        return runner.sampler.sample(logits, plan.sequences)

    drive(core, runner, {0: [request("a", prompt(5, 1), 6)],
                         1: [request("b", prompt(13, 2), 4, temperature=1.0, seed=3)]}, execute)
    assert max(worst) < 0.1 and core.is_drained()
