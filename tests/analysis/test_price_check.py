from analysis.price_check import NEW_TOKENS, PROMPT_TOKENS, load
from analysis.validate.matrix import SETTINGS


def test_the_check_fits_a_small_context_and_the_smallest_pool_the_matrix_runs():
    assert [r.prompt_tokens for r in load(2048)] == list(PROMPT_TOKENS)
    assert [r.prompt_tokens for r in load(256)] == [min(n, 256 - NEW_TOKENS)
                                                   for n in PROMPT_TOKENS]
    assert all(r.max_new_tokens == NEW_TOKENS and r.ignore_eos for r in load(256))
    # every request's blocks at once, as reservation takes them: no wait, no preemption
    blocks = sum(-(-(r.prompt_tokens + r.max_new_tokens) // 16) for r in load(2048))
    assert blocks == 84 <= SETTINGS["optimistic-small-pool"]["num_blocks"]
    # two at a time, while the two before decode
    assert [r.arrival_s for r in load(2048)] == [0.0, 0.0, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75]
