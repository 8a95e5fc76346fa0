import pytest

from scheduler import (BlockPool, DoubleRelease, FinishReason, InvalidRequest, QueueFull, Request,
                       RequestTooLarge, CoreSnapshot)

from core_helpers import drain, finishes, make_core, req, step, tokens_of


def test_block_limited_admission_keeps_arrival_order():
    core = make_core(num_blocks=10, block_size=4, max_batch=8, max_overtakes=0)
    core.submit(req(0, prompt=8, new=8))   # 4 blocks
    core.submit(req(1, prompt=16, new=16))  # 8 blocks: does not fit beside r0
    core.submit(req(2, prompt=1, new=3))   # 1 block: would fit, must not overtake r1
    plan, _ = step(core)
    assert [s.id for s in plan.prefills] == ["r0"]
    while core.sequence("r0") is not None:
        plan, _ = step(core)
        assert "r2" not in [s.id for s in plan.prefills]
    plan, _ = step(core)
    assert [s.id for s in plan.prefills] == ["r1", "r2"]
    drain(core)
    assert core.is_drained()


def test_batch_limit_holds():
    core = make_core(num_blocks=100, max_batch=3)
    for i in range(7):
        core.submit(req(i, new=4))
    seen_max = 0
    while core.has_work():
        plan, _ = step(core)
        seen_max = max(seen_max, len(plan.sequences))
        assert core.snapshot().running <= 3
    assert seen_max == 3
    assert core.is_drained()


def test_waiting_limit_refuses_with_distinct_error():
    core = make_core(max_waiting=2, max_batch=1)
    core.submit(req(0))
    core.submit(req(1))
    with pytest.raises(QueueFull):
        core.submit(req(2))
    step(core)  # r0 admitted: one waiting, so one more may come
    core.submit(req(3))
    with pytest.raises(QueueFull):
        core.submit(req(4))
    drain(core)
    assert core.is_drained()


def test_request_that_can_never_fit_is_refused_at_submit():
    core = make_core(num_blocks=4, block_size=4, max_model_len=64)
    with pytest.raises(RequestTooLarge, match="5 KV blocks"):
        core.submit(Request("big", 10, 10))
    with pytest.raises(RequestTooLarge, match="context of 64"):
        core.submit(Request("long", 60, 10))
    with pytest.raises(InvalidRequest):
        core.submit(Request("empty", 0, 10))
    with pytest.raises(InvalidRequest):
        core.submit(Request("none", 3, 0))
    assert core.is_drained()


def test_duplicate_live_id_is_refused_and_reusable_after_finish():
    core = make_core()
    core.submit(req(0, new=1))
    with pytest.raises(InvalidRequest, match="already in use"):
        core.submit(req(0, new=1))
    drain(core)
    core.submit(req(0, new=1))
    drain(core)
    assert core.is_drained()


def test_double_release_raises_naming_the_sequence():
    pool = BlockPool(4, 2)
    pool.reserve("seq-a", 2)
    pool.grow("seq-a", 3)
    pool.release("seq-a")
    with pytest.raises(DoubleRelease, match="seq-a"):
        pool.release("seq-a")
    assert pool.is_whole()
    assert (pool.reservations, pool.releases) == (1, 1)  # the refused release is not counted


def test_the_pool_counts_one_reservation_and_one_release_per_admitted_request():
    core = make_core(num_blocks=12, block_size=4, max_batch=2)
    for i in range(5):
        core.submit(req(i, prompt=3, new=4))
    step(core)
    assert (core.pool.reservations, core.pool.releases) == (2, 0)
    core.cancel("r0")
    core.cancel("r4")  # still waiting: never admitted, never reserved
    drain(core)
    assert core.pool.is_whole()
    assert (core.pool.reservations, core.pool.releases) == (4, 4)


def test_block_table_grows_within_reservation():
    core = make_core(num_blocks=8, block_size=4)
    core.submit(req(0, prompt=3, new=6))  # 9 tokens: 3 blocks reserved
    plan, _ = step(core)
    seq = plan.prefills[0]
    assert len(seq.block_table) == 1 and core.pool.reserved_blocks == 3
    lens = []
    while core.sequence("r0") is not None:
        plan, _ = step(core)
        lens.append((seq.num_tokens, len(seq.block_table)))
    # a decode writes the KV of the previous token, so it needs num_tokens-1 slots
    # before the step; the table covers them all, and never exceeds the reservation
    assert lens[:3] == [(5, 1), (6, 2), (7, 2)]
    assert max(n for _, n in lens) <= 3
    assert core.is_drained()


def test_summary_after_each_step():
    core = make_core(num_blocks=10, block_size=4, max_batch=2)
    core.submit(req(0, prompt=4, new=2))  # 2 blocks
    core.submit(req(1, prompt=4, new=8))  # 3 blocks
    core.submit(req(2, prompt=4, new=2))  # 2 blocks
    step(core)
    assert core.snapshot() == CoreSnapshot(step=1, running=2, waiting=1, paused=0, blocks_free=5,
                                         blocks_reserved=5, blocks_used=2, inbox=0)
    step(core)  # r0 finishes (2 tokens)
    assert core.snapshot() == CoreSnapshot(step=2, running=1, waiting=1, paused=0, blocks_free=7,
                                         blocks_reserved=3, blocks_used=2, inbox=0)
    core.pause("r1")
    assert core.snapshot().inbox == 1
    step(core)  # r2 admitted, r1 paused
    assert core.snapshot() == CoreSnapshot(step=3, running=1, waiting=0, paused=1, blocks_free=5,
                                         blocks_reserved=5, blocks_used=3, inbox=0)


def test_tokens_and_finish_reasons_from_executor():
    core = make_core()
    core.submit(req(0, new=5))
    core.submit(req(1, new=5))
    plan, events = step(core)
    plan, more = step(core, ends={"r1": FinishReason.EOS})
    events += more + drain(core)
    assert tokens_of(events, "r0") == [0, 1, 2, 3, 4]
    assert tokens_of(events, "r1") == [0, 1]
    assert finishes(events) == {"r0": FinishReason.LENGTH, "r1": FinishReason.EOS}
    assert core.is_drained()


def test_prefill_budget_admits_at_least_one():
    core = make_core(num_blocks=100, max_prefill_tokens=10)
    core.submit(req(0, prompt=30, new=2))
    core.submit(req(1, prompt=4, new=2))
    core.submit(req(2, prompt=4, new=2))
    plan, _ = step(core)
    assert [s.id for s in plan.prefills] == ["r0"]
    plan, _ = step(core)
    assert [s.id for s in plan.prefills] == ["r1", "r2"]
    assert plan.features.prefill_tokens == 8 and plan.features.decode_batch == 1
    drain(core)
    assert core.is_drained()
