"""With `prefill_pass_tokens`, a step's prompts run as passes of whole prompts of at
most that many tokens (a longer one alone), the decodes and the chunks that end no
prompt in the last pass: every greedy token is the one a single pass makes."""
import pytest

from live.engine.passes import run_in_passes
from scheduler import prefill_passes
from tiny_models import BUILDERS, drive, make, prompt, request

PASS_TOKENS = 16
ARRIVALS = {  # step -> (id, prompt length, new tokens)
    0: [("a", 5, 8), ("b", 9, 6), ("c", 1, 9), ("d", 21, 4), ("e", 7, 5)],
    3: [("f", 6, 5), ("g", 12, 3), ("h", 3, 6)],
    6: [("i", 30, 4)],
}


class PassLog:
    """A runner that notes what each of its runs computes."""

    def __init__(self, runner):
        self.runner = runner
        self.runs: list[tuple[int, list[int], int, int]] = []
        """Per run: the step, its prefills' tokens, its partials, its decodes."""

    def execute(self, plan):
        self.runs.append((plan.index, [seq.chunk for seq in plan.prefills], len(plan.partials),
                          len(plan.decodes)))
        return self.runner.execute(plan)


def arrivals():
    return {step: [request(i, prompt(n, seed=n), new) for i, n, new in reqs]
            for step, reqs in ARRIVALS.items()}


@pytest.mark.parametrize("scheduling", [{}, dict(max_prefill_tokens=24, chunked_prefill=True)],
                         ids=["whole", "chunked"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_passes_make_the_tokens_of_one_pass(family, scheduling):
    model = BUILDERS[family]()
    core, runner = make(model, **scheduling)
    one_pass = drive(core, runner, arrivals())

    core, runner = make(model, prefill_pass_tokens=PASS_TOKENS, **scheduling)
    log = PassLog(runner)
    ran_early: list[int] = []

    def execute(plan):
        passes = prefill_passes(plan.prefills, core.config.prefill_pass_tokens)
        run, _ = run_in_passes(log, plan, passes, frozenset(),
                               lambda run: ran_early.append(len(run.plan.prefills)))
        assert run.plan is plan and not run.failed
        return run.tokens

    assert drive(core, runner, arrivals(), execute) == one_pass
    assert core.is_drained()

    steps: dict[int, list] = {}
    for index, prefills, partials, decodes in log.runs:
        steps.setdefault(index, []).append((prefills, partials, decodes))
    cut = [runs for runs in steps.values() if len(runs) > 1]
    assert cut and sum(len(runs) - 1 for runs in cut) == len(ran_early)
    for runs in cut:
        for prefills, partials, decodes in runs[:-1]:
            assert prefills and not partials and not decodes
            assert sum(prefills) <= PASS_TOKENS or len(prefills) == 1
        # a pass is cut only where the next prompt would not fit
        for (before, *_), (after, *_) in zip(runs, runs[1:]):
            assert sum(before) + after[0] > PASS_TOKENS
    if not scheduling:  # the first step's five prompts, then the second's decodes alone
        assert steps[1] == [([5, 9, 1], 0, 0), ([21], 0, 0), ([7], 0, 0)]
        assert steps[2] == [([], 0, 5)]


def test_without_the_setting_a_step_is_one_pass():
    seqs = [object()] * 3
    assert prefill_passes(seqs, None) == [seqs] == prefill_passes(seqs, 0)
