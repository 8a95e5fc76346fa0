"""The calibration workload covers what the cost model reads: prompt lengths alone,
every decode batch size, and long contexts at the largest batches, within the
model's length, in phases that each start once the one before has drained."""
from analysis.workloads import (EVERY_SIZE_TO, LONG_PROMPTS, LONG_TOKENS, SOLO_PROMPTS, batch_ladder,
                                calibration_workload)


def named(phases, prefix):
    return [phase for phase in phases if phase[0].id.startswith(prefix)]


def kind(phase):
    """`ladder-N` for a rung of climb N, else what its ids begin with."""
    first = phase[0].id
    return first[:len("ladder-0")] if first.startswith("ladder-") else first.split("-")[0]


def test_the_phases_in_order():
    phases = calibration_workload(16)
    kinds = [kind(phase) for phase in phases]
    sizes = len(batch_ladder(16))
    assert kinds == (["ladder-0"] * sizes + ["solo"] * len(SOLO_PROMPTS) + ["burst", *["ladder-1"] * sizes,
                     "mixed", *["ladder-2"] * sizes, "long"])
    # every request once, each phase's own ids alike
    ids = [r.id for phase in phases for r in phase]
    assert len(ids) == len(set(ids))
    assert all(len({r.id.rsplit("-", 1)[0] for r in phase}) == 1 for phase in phases
               if not phase[0].id.startswith("mixed"))


def test_every_batch_size_of_the_ladder_arrives_at_once_in_three_climbs():
    phases = calibration_workload(16)
    assert batch_ladder(16) == list(range(1, 17))
    assert batch_ladder(40) == [*range(1, 17), 22, 29, 40]
    assert batch_ladder(32) == [*range(1, 17), 20, 25, 32]
    assert batch_ladder(3) == [1, 2, 3]
    rungs = named(phases, "ladder-")
    assert [len(g) for g in rungs] == batch_ladder(16) * 3
    assert all(r.arrival_s == 0.0 for rung in rungs for r in rung)
    assert [r.prompt_tokens for [r] in named(phases, "solo-")] == list(SOLO_PROMPTS)
    [burst] = named(phases, "burst-")
    assert len(burst) == 16 and {r.arrival_s for r in burst} == {0.0}


def test_the_full_batch_decodes_long_contexts():
    phases = calibration_workload(16)
    [rung] = named(phases, "long-")
    assert len(rung) == 16 and {r.max_new_tokens for r in rung} == {LONG_TOKENS}
    low, high = LONG_PROMPTS
    prompts = [r.prompt_tokens for r in rung]
    assert min(prompts) == low and low < max(prompts) < high
    # its last steps decode far longer contexts than the ladder's, from a prefill no larger
    ladder = named(phases, "ladder-")[-1]
    assert sum(prompts) + 16 * LONG_TOKENS > 3 * sum(r.prompt_tokens + r.max_new_tokens for r in ladder)
    assert sum(prompts) < 2 * sum(r.prompt_tokens for r in ladder)
    assert phases[-1] is rung


def test_the_ladder_climbs_past_the_batch_the_long_contexts_are_decoded_at():
    """Sizes up to `ladder_top` are measured for what-ifs at larger batches; the
    long contexts stay at the server's own batch, and a larger rung's prompts
    repeat the smaller rungs' lengths, so that its prefill grows with its size."""
    phases = calibration_workload(16, ladder_top=32)
    rungs = named(phases, "ladder-")
    assert [len(g) for g in rungs] == batch_ladder(32) * 3
    [rung] = named(phases, "long-")
    assert len(rung) == 16
    smaller = named(calibration_workload(16), "ladder-0-")
    assert named(phases, "ladder-0-")[:EVERY_SIZE_TO] == smaller
    largest = max(rungs, key=len)
    assert sorted(r.prompt_tokens for r in largest) == sorted(2 * [r.prompt_tokens for r in smaller[-1]])


def test_prompts_fit_the_model_with_their_output():
    requests = [r for phase in calibration_workload(4, max_model_len=256) for r in phase]
    assert max(r.prompt_tokens + r.max_new_tokens for r in requests) == 256
    assert {r.max_new_tokens for r in requests if r.id.startswith("long-")} == {128}
    assert all(r.prompt_tokens >= 1 for r in requests)
    assert [r.id for phase in calibration_workload(4) for r in phase] == [r.id for r in requests]


def test_time_scale_packs_the_mixed_arrivals_closer():
    full, packed = calibration_workload(8), calibration_workload(8, time_scale=0.25)
    assert [[r.id for r in p] for p in full] == [[r.id for r in p] for p in packed]
    [mixed], [mixed_packed] = named(full, "mixed-"), named(packed, "mixed-")
    assert max(r.arrival_s for r in mixed) > 10
    assert [r.arrival_s * 0.25 for r in mixed] == [r.arrival_s for r in mixed_packed]
