"""A prefill that packs more rows than one pass takes (on the CPU,
`PREFILL_PASS_ROWS`) runs as several passes of whole chunks: every logit is still
transformers' own and in plan order, prompts ending and prompt chunks alike, with
the step's decodes in the last pass; a chunk longer than a pass runs alone."""
import pytest

from live.runner import model_runner
from tiny_models import BUILDERS, assert_rows_match_transformers, drive, make, prompt, request

ARRIVALS = {  # step -> (id, prompt length, new tokens)
    0: [("a", 5, 8), ("b", 19, 6), ("c", 1, 9)],
    2: [("d", 33, 5), ("e", 7, 3), ("g", 4, 3), ("h", 6, 4)],
    5: [("f", 12, 4)],
}


def test_the_cpu_cuts_big_prefills():
    _, runner = make(BUILDERS["llama"]())
    assert runner.pass_rows == model_runner.PREFILL_PASS_ROWS


@pytest.mark.parametrize("scheduling", [{}, dict(max_prefill_tokens=9, chunked_prefill=True)],
                         ids=["whole", "chunked"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_passes_give_transformers_logits_in_plan_order(family, scheduling):
    model = BUILDERS[family]()
    core, runner = make(model, **scheduling)
    runner.pass_rows = 8
    passes, run_pass = [], runner._prefill_pass

    def counted(seqs, partials, decodes):
        passes.append((len(seqs), len(partials), len(decodes)))
        return run_pass(seqs, partials, decodes)

    runner._prefill_pass = counted
    multi_pass_steps, decodes_riding = 0, 0

    def execute(plan):
        before = len(passes)
        logits = runner.forward_logits(plan)
        assert_rows_match_transformers(model, logits, plan.sequences)
        step = passes[before:]
        if len(step) > 1:
            nonlocal multi_pass_steps, decodes_riding
            multi_pass_steps += 1
            assert all(d == 0 for *_, d in step[:-1]) and step[-1][2] == len(plan.decodes)
            decodes_riding += bool(plan.decodes)
        return runner.sampler.sample(logits, plan.sequences)

    arrivals = {step: [request(i, prompt(n, seed=len(i) + n), new) for i, n, new in reqs]
                for step, reqs in ARRIVALS.items()}
    outputs = drive(core, runner, arrivals, execute)

    assert multi_pass_steps >= 2 and decodes_riding >= 1
    assert {i: len(t) for i, t in outputs.items()} == {
        i: new for reqs in ARRIVALS.values() for i, _, new in reqs}
    assert core.is_drained()
