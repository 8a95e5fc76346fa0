"""The calibration workload covers what the cost model reads: prompt lengths alone,
every decode batch size, and long contexts at the largest batches, within the
model's length."""
from analysis.workloads import (EVERY_SIZE_TO, LONG_PROMPTS, LONG_TOKENS, SOLO_PROMPTS, batch_ladder,
                                calibration_workload)


def by_group(workload, prefix):
    groups = {}
    for r in workload:
        if r.id.startswith(prefix):
            groups.setdefault(r.arrival_s, []).append(r)
    return list(groups.values())


def test_every_batch_size_of_the_ladder_arrives_at_once_in_three_climbs_apart():
    workload = calibration_workload(16)
    assert batch_ladder(16) == list(range(1, 17))
    assert batch_ladder(40) == [*range(1, 17), 22, 29, 40]
    assert batch_ladder(32) == [*range(1, 17), 20, 25, 32]
    assert batch_ladder(3) == [1, 2, 3]
    assert [len(g) for g in by_group(workload, "ladder-")] == batch_ladder(16) * 3
    climbs = [[r for r in workload if r.id.startswith(f"ladder-{n}-")] for n in range(3)]
    starts = [min(r.arrival_s for r in climb) for climb in climbs]
    ends = [max(r.arrival_s for r in climb) for climb in climbs]
    # other work between the climbs: the solo prompts and the burst, the mixed arrivals
    for end, start, between in zip(ends, starts[1:], ("solo-", "mixed-")):
        assert start - end > 20
        assert any(end < r.arrival_s < start for r in workload if r.id.startswith(between))
    assert [r.prompt_tokens for r in workload if r.id.startswith("solo-")] == list(SOLO_PROMPTS)


def test_the_full_batch_decodes_long_contexts():
    workload = calibration_workload(16)
    [rung] = by_group(workload, "long-")
    assert len(rung) == 16 and {r.max_new_tokens for r in rung} == {LONG_TOKENS}
    low, high = LONG_PROMPTS
    prompts = [r.prompt_tokens for r in rung]
    assert min(prompts) == low and low < max(prompts) < high
    # its last steps decode far longer contexts than the ladder's, from a prefill no larger
    ladder = by_group(workload, "ladder-")[-1]
    assert sum(prompts) + 16 * LONG_TOKENS > 3 * sum(r.prompt_tokens + r.max_new_tokens for r in ladder)
    assert sum(prompts) < 2 * sum(r.prompt_tokens for r in ladder)
    starts = [g[0].arrival_s for g in by_group(workload, "ladder-") + [rung]]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


def test_prompts_fit_the_model_with_their_output():
    workload = calibration_workload(4, max_model_len=256)
    assert max(r.prompt_tokens + r.max_new_tokens for r in workload) == 256
    assert {r.max_new_tokens for r in workload if r.id.startswith("long-")} == {128}
    assert all(r.prompt_tokens >= 1 for r in workload)
    assert [r.id for r in calibration_workload(4)] == [r.id for r in workload]


def test_time_scale_packs_arrivals_closer():
    full, packed = calibration_workload(8), calibration_workload(8, time_scale=0.25)
    assert [r.id for r in full] == [r.id for r in packed]
    assert [r.arrival_s * 0.25 for r in full] == [r.arrival_s for r in packed]


def test_the_solo_requests_come_after_the_first_climb_has_room_to_drain():
    """They time the server's overheads on an idle engine: one that found the
    largest size still decoding measured the wait for its step as the loop's wake-up."""
    workload = calibration_workload(16)
    last_rung = max(r.arrival_s for r in workload if r.id.startswith("ladder-0-"))
    first_solo = min(r.arrival_s for r in workload if r.id.startswith("solo-"))
    assert first_solo >= last_rung + 1.0 + 0.25 * 16 + 1.0


def test_the_ladder_climbs_past_the_batch_the_long_contexts_are_decoded_at():
    """Sizes up to `ladder_top` are measured for what-ifs at larger batches; the
    long contexts stay at the server's own batch, and a larger rung's prompts
    repeat the smaller rungs' lengths, so that each rung's prefill ends well before
    the next rung arrives."""
    workload = calibration_workload(16, ladder_top=32)
    rungs = by_group(workload, "ladder-")
    assert [len(g) for g in rungs] == batch_ladder(32) * 3
    [rung] = by_group(workload, "long-")
    assert len(rung) == 16
    def first_climb(groups):
        return [[(r.id, r.prompt_tokens, r.arrival_s) for r in g] for g in groups
                if g[0].id.startswith("ladder-0-")]
    assert first_climb(rungs)[:EVERY_SIZE_TO] == first_climb(by_group(calibration_workload(16), "ladder-"))
    largest = max(rungs, key=len)
    widest = max((g for g in rungs if len(g) == EVERY_SIZE_TO), key=len)
    assert sorted(r.prompt_tokens for r in largest) == sorted(2 * [r.prompt_tokens for r in widest])
    # the room after each rung grows with its prefill
    starts = sorted({g[0].arrival_s for g in rungs if g[0].id.startswith("ladder-0-")})
    rooms = dict(zip(batch_ladder(32), [b - a for a, b in zip(starts, starts[1:])]))
    assert rooms[25] / rooms[20] > 25 / 20 * 0.95 and rooms[16] < rooms[20]
