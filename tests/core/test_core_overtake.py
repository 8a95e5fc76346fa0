"""Admission past a waiting request that does not fit: a later one that fits may go
ahead of it, at most `max_overtakes` times; then nothing overtakes it, it waits for
room and admission stops behind it. 0 keeps strict arrival order."""
import pytest
from hypothesis import given, settings, strategies as st

from scheduler import (ADMISSION_POLICIES, FinishEvent, FinishReason, Request, SchedulerConfig,
                       SeqState)

from core_helpers import drain, finishes, make_core, play, step, workloads


def big_head(core):
    """r0 holds 4 of 10 blocks; r1 (8 blocks) cannot fit beside it."""
    core.submit(Request("r0", 8, 8))
    core.submit(Request("r1", 16, 16))
    plan, _ = step(core)
    assert [s.id for s in plan.admitted] == ["r0"]


def admitted_ids(plan):
    return [s.id for s in plan.admitted]


def test_the_bound_must_not_be_negative():
    with pytest.raises(ValueError, match="max_overtakes"):
        SchedulerConfig(num_blocks=4, max_overtakes=-1)


def test_zero_keeps_strict_arrival_order():
    core = make_core(num_blocks=10, block_size=4, max_overtakes=0)
    big_head(core)
    core.submit(Request("small", 1, 3))
    while core.sequence("r0") is not None:
        plan, _ = step(core)
        assert "small" not in admitted_ids(plan)
    plan, _ = step(core)
    assert admitted_ids(plan) == ["r1", "small"]
    assert core.snapshot().overtakes == 0
    drain(core)
    assert core.is_drained()


def test_a_small_request_that_fits_goes_ahead_of_a_big_one_that_does_not():
    core = make_core(num_blocks=10, block_size=4, max_overtakes=1)
    big_head(core)
    core.submit(Request("small", 1, 3))
    plan, _ = step(core)
    assert admitted_ids(plan) == ["small"]
    assert core.sequence("r1").overtaken == 1
    assert core.snapshot().overtakes == 1
    events = drain(core)
    # the big one still runs to its end, in its turn
    assert finishes(events) == {"r0": FinishReason.LENGTH, "r1": FinishReason.LENGTH,
                                "small": FinishReason.LENGTH}
    assert core.is_drained()
    assert core.pool.reservations == core.pool.releases == 3


def test_the_bound_is_kept_exactly_then_admission_stops_behind_the_big_one():
    core = make_core(num_blocks=10, block_size=4, max_batch=8, max_overtakes=2)
    big_head(core)
    for i in range(4):
        core.submit(Request(f"s{i}", 1, 3))  # one block each, all fit the 6 free
    plan, _ = step(core)
    assert admitted_ids(plan) == ["s0", "s1"]
    assert core.sequence("r1").overtaken == 2
    assert [s.id for s in core.waiting] == ["r1", "s2", "s3"]
    order = []
    while core.has_work():
        plan, _ = step(core)
        order += admitted_ids(plan)
    # r1 waits for room (r0, s0 and s1 to finish) and nothing goes ahead of it meanwhile
    assert order == ["r1", "s2", "s3"]
    assert core.snapshot().overtakes == 2
    assert core.is_drained()
    assert core.pool.reservations == core.pool.releases == 6


def test_each_request_passed_over_counts_and_the_first_at_its_bound_stops_admission():
    core = make_core(num_blocks=11, block_size=4, max_batch=8, max_overtakes=2)
    core.submit(Request("r0", 8, 8))     # 4 blocks
    core.submit(Request("big", 16, 16))  # 8: does not fit beside r0
    core.submit(Request("s0", 1, 3))     # 1: fits, overtakes big
    plan, _ = step(core)
    assert admitted_ids(plan) == ["r0", "s0"]
    assert core.sequence("big").overtaken == 1
    core.submit(Request("mid", 12, 16))  # 7: does not fit in the 6 free
    core.submit(Request("s1", 1, 3))     # overtakes both
    core.submit(Request("s2", 1, 3))     # would be big's third: stops
    plan, _ = step(core)
    assert admitted_ids(plan) == ["s1"]
    assert (core.sequence("big").overtaken, core.sequence("mid").overtaken) == (2, 1)
    assert [s.id for s in core.waiting] == ["big", "mid", "s2"]
    drain(core)
    assert core.is_drained()


def test_a_paused_waiting_request_is_not_overtaken_it_is_passed_over():
    core = make_core(num_blocks=10, block_size=4, max_overtakes=0)
    big_head(core)
    core.pause("r1")
    core.submit(Request("small", 1, 3))
    plan, _ = step(core)
    assert admitted_ids(plan) == ["small"]
    assert core.sequence("r1").overtaken == 0 and core.snapshot().overtakes == 0
    core.resume("r1")
    drain(core)
    assert core.is_drained()


def test_a_cancelled_big_request_leaves_its_place_to_those_behind():
    core = make_core(num_blocks=10, block_size=4, max_overtakes=1)
    big_head(core)
    core.submit(Request("s0", 1, 3))
    core.submit(Request("s1", 1, 3))
    plan, _ = step(core)
    assert admitted_ids(plan) == ["s0"]
    core.cancel("r1")
    plan, events = step(core)
    assert admitted_ids(plan) == ["s1"]
    assert finishes(events) == {"r1": FinishReason.CANCELLED}
    drain(core)
    assert core.is_drained()



def test_a_request_resumed_while_the_big_one_waits_is_looked_at_again():
    core = make_core(num_blocks=10, block_size=4, max_overtakes=4)
    big_head(core)
    core.submit(Request("small", 1, 3))
    core.pause("small")
    plan, _ = step(core)  # r1 does not fit, small is paused: nothing to admit
    assert admitted_ids(plan) == []
    core.resume("small")
    plan, _ = step(core)
    assert admitted_ids(plan) == ["small"]
    drain(core)
    assert core.is_drained()


def test_a_cancelled_request_that_was_passed_over_stops_nothing():
    core = make_core(num_blocks=10, block_size=4, max_overtakes=1)
    core.submit(Request("r0", 8, 8))     # 4 blocks
    core.submit(Request("mid", 12, 16))  # 7: does not fit in the 6 free
    plan, _ = step(core)
    assert admitted_ids(plan) == ["r0"]
    core.cancel("mid")
    core.submit(Request("s0", 1, 3))
    core.submit(Request("s1", 1, 3))
    plan, _ = step(core)
    assert admitted_ids(plan) == ["s0", "s1"]
    assert core.snapshot().overtakes == 0
    drain(core)
    assert core.is_drained()



@settings(max_examples=300, deadline=None)
@given(ops=workloads(24, 16, 2), num_blocks=st.integers(4, 24), block_size=st.integers(1, 8),
       max_batch=st.integers(1, 6), bound=st.integers(0, 5),
       policy=st.sampled_from(sorted(ADMISSION_POLICIES)),
       chunk_budget=st.one_of(st.none(), st.integers(1, 16)))
def test_random_workloads_keep_the_limits_the_bound_and_admit_every_request(
        ops, num_blocks, block_size, max_batch, bound, policy, chunk_budget):
    core = make_core(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                     max_waiting=10, admission=ADMISSION_POLICIES[policy](), max_overtakes=bound,
                     max_prefill_tokens=chunk_budget, chunked_prefill=chunk_budget is not None)
    finished = {}
    admitted_at: dict[str, int] = {}
    overtaken: dict[str, int] = {}
    steps = 0

    def do_step(stop_at):
        nonlocal steps
        plan = core.plan()
        steps += 1
        for seq in plan.admitted:
            admitted_at.setdefault(seq.id, steps)
            overtaken.setdefault(seq.id, seq.overtaken)
        assert all(s.overtaken <= bound for s in core.waiting)
        if chunk_budget is None and not plan.preempted:
            nothing_left_that_fits()
        ends = {s.id: FinishReason.STOP for s in plan.sequences if int(s.id[1:]) in stop_at}
        for e in core.commit(plan, [7] * len(plan.sequences), ends):
            if isinstance(e, FinishEvent):
                finished[e.seq_id] = e.reason
        snapshot = core.snapshot()
        assert len(core.running) <= max_batch
        assert snapshot.blocks_reserved == sum(s.reserved for s in core.running) <= num_blocks

    def nothing_left_that_fits():
        """After admission, with a slot free, no ready waiting request fits unless an
        earlier one that does not may be overtaken no more."""
        if len(core.running) >= max_batch:
            return
        headroom = core.admission.headroom(num_blocks) if core.running else 0
        for seq in core.waiting:
            if seq.state is SeqState.PAUSED:
                continue
            assert core.admission.reservation(seq, block_size) + headroom > core.pool.free_blocks
            if seq.overtaken >= bound:
                break

    accepted = play(core, ops, do_step)
    assert core.is_drained()
    assert set(finished) == set(accepted)
    # every accepted request not cancelled while it waited was admitted
    assert {r for r in accepted if finished[r] is not FinishReason.CANCELLED} <= set(admitted_at)
    assert core.pool.reservations == core.pool.releases
    if policy == "reserve":  # no preemption: each admission is a request's only one
        order = {r: i for i, r in enumerate(accepted)}
        paused_ever = {f"r{op[1]}" for op in ops if op[0] == "pause"}
        for r, step_index in admitted_at.items():
            if r in paused_ever:
                continue  # a paused request is passed over, not overtaken
            later_first = sum(1 for o, s in admitted_at.items()
                              if order[o] > order[r] and s < step_index)
            assert overtaken[r] == later_first <= bound, r
        if bound == 0:
            firsts = [r for r in sorted(admitted_at, key=lambda r: (admitted_at[r], order[r]))
                      if r not in paused_ever]
            assert firsts == sorted(firsts, key=order.__getitem__)
