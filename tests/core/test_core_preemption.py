"""Optimistic admission: hold only the blocks already written, grow a block at a
time, and preempt the newest sequence when none is free; it is recomputed on
re-admission, its output kept and continued."""
import pytest

from scheduler import (FinishEvent, FinishReason, Optimistic, Request, RequestTooLarge,
                       ReserveWhole, Scheduler, SchedulerConfig, SeqState, TokenEvent)

from core_helpers import drain, finishes, make_core, step, tokens_of

BS = 4


def core_with(policy, num_blocks=8, max_batch=8):
    return make_core(num_blocks=num_blocks, block_size=BS, max_batch=max_batch, admission=policy)


def submit_all(core, n, prompt=4, new=12):
    for i in range(n):
        core.submit(Request(f"r{i}", prompt, new))


def test_more_sequences_run_at_once_on_the_same_pool():
    reserve, optimistic = core_with(ReserveWhole()), core_with(Optimistic(watermark=0))
    for core in (reserve, optimistic):
        submit_all(core, 6)
    # 4 + 12 tokens need 4 blocks each: two reservations fill 8 blocks; the prompts need one each
    assert [s.id for s in step(reserve)[0].prefills] == ["r0", "r1"]
    assert [s.id for s in step(optimistic)[0].prefills] == [f"r{i}" for i in range(6)]
    assert optimistic.pool.reserved_blocks == 6 and [s.reserved for s in optimistic.running] == [1] * 6


def test_the_newest_is_preempted_recomputed_and_continues_where_it_was():
    core = core_with(Optimistic(watermark=0))
    submit_all(core, 6)
    events, plans, readmitted, queue_at_first = [], [], [], None
    while core.has_work():
        plan = core.plan()
        plans.append(plan)
        if core.preemptions and queue_at_first is None:
            queue_at_first = [s.id for s in core.waiting]
        readmitted += [(plan, s.id, s.num_tokens) for s in plan.prefills if s.output]
        events += core.commit(plan, [len(s.output) for s in plan.sequences])
        assert core.pool.reserved_blocks == sum(s.reserved for s in core.running) <= 8
        for seq in core.waiting:
            assert seq.reserved == 0 and seq.block_table == [] and seq.state is SeqState.WAITING

    # every sequence made its 12 tokens once each, in order, whatever it went through
    assert finishes(events) == {f"r{i}": FinishReason.LENGTH for i in range(6)}
    for i in range(6):
        assert tokens_of(events, f"r{i}") == list(range(12))
        assert [e.index for e in events if isinstance(e, TokenEvent) and e.seq_id == f"r{i}"] == list(range(12))
    assert core.is_drained()
    assert core.preemptions > 0
    assert core.pool.reservations == core.pool.releases == 6 + core.preemptions

    # re-admissions prefill prompt and output again, and are counted as recomputed
    assert len(readmitted) == core.preemptions
    ends = [e for e in events if isinstance(e, FinishEvent)]
    assert sum(e.preemptions for e in ends) == core.preemptions  # each end tells its own
    assert sum(e.recomputed_tokens for e in ends) == core.recomputed_tokens
    for e in ends:
        assert e.preemptions == sum(1 for _, rid, _ in readmitted if rid == e.seq_id)
    assert core.recomputed_tokens == sum(n for _, _, n in readmitted)
    for plan, rid, n in readmitted:
        assert plan.features.prefill_tokens >= n > 4
    assert "r0" not in {rid for _, rid, _ in readmitted}

    # Step 2: all six write their 5th token, which needs a second block. r0 and r1
    # take the two free ones; r2 and r3 take those of the newest, r5 then r4, which
    # queue in arrival order.
    assert [s.id for s in plans[1].decodes] == ["r0", "r1", "r2", "r3"]
    assert queue_at_first == ["r4", "r5"]


def test_a_step_that_preempts_admits_nothing_new():
    core = core_with(Optimistic(watermark=0), num_blocks=4)
    core.submit(Request("a", 4, 8))
    core.submit(Request("b", 4, 8))
    step(core)  # both admitted, a block each
    step(core)  # each writes its 5th token into a second block: the pool is full
    assert core.pool.free_blocks == 0
    for _ in range(3):
        step(core)
    core.submit(Request("c", 1, 1))
    plan, _ = step(core)  # a's 9th token needs a third block: b goes
    assert core.preemptions == 1 and [s.id for s in plan.decodes] == ["a"]
    assert [s.id for s in plan.preempted] == ["b"]
    assert plan.prefills == [] and [s.id for s in core.waiting] == ["b", "c"]


def test_the_reserve_policy_never_preempts():
    core = core_with(ReserveWhole())
    submit_all(core, 6)
    events = drain(core)
    assert core.preemptions == core.recomputed_tokens == 0
    assert core.pool.reservations == core.pool.releases == 6
    assert all(tokens_of(events, f"r{i}") == list(range(12)) for i in range(6))


def test_a_request_longer_than_the_pool_is_refused_whatever_its_prompt():
    core = core_with(Optimistic(watermark=0))
    with pytest.raises(RequestTooLarge, match="needs 9 KV blocks; the pool has 8"):
        core.submit(Request("long", 4, 32))
    assert core.is_drained()


def test_a_lone_request_may_fill_the_pool_past_the_watermark():
    core = core_with(Optimistic(watermark=0.5))
    core.submit(Request("big", 28, 4))  # 7 of 8 blocks for the prompt, the watermark is 4
    core.submit(Request("small", 1, 1))
    plan, _ = step(core)
    assert [s.id for s in plan.prefills] == ["big"]  # small waits: big left less than 4 free
    drain(core)
    assert core.is_drained() and core.preemptions == 0


def test_a_preempted_sequence_cancelled_in_the_queue_is_never_readmitted():
    core = core_with(Optimistic(watermark=0), num_blocks=4)
    for rid in ("a", "b", "c"):
        core.submit(Request(rid, 4, 8))
    step(core)  # three prompts, a block each
    plan, _ = step(core)  # a takes the last free block for its 5th token; b takes c's
    assert [s.id for s in plan.decodes] == ["a", "b"] and [s.id for s in core.waiting] == ["c"]
    core.cancel("c")
    plan, events = step(core)
    assert [(e.seq_id, e.reason, e.num_generated) for e in events if isinstance(e, FinishEvent)] == \
        [("c", FinishReason.CANCELLED, 1)]
    events += drain(core)
    assert finishes(events) == {"c": FinishReason.CANCELLED, "a": FinishReason.LENGTH,
                                "b": FinishReason.LENGTH}
    assert core.is_drained() and core.pool.reservations == core.pool.releases == 4


def test_a_paused_sequence_may_be_preempted_and_resumes_by_recompute():
    core = core_with(Optimistic(watermark=0), num_blocks=3)
    core.submit(Request("old", 4, 8))
    core.submit(Request("new", 4, 8))
    step(core)
    core.pause("new")
    plan, _ = step(core)  # old writes its 5th token: 2 blocks; new holds 1 while paused
    assert [s.id for s in plan.decodes] == ["old"] and core.pool.free_blocks == 0
    for _ in range(3):
        step(core)
    plan, _ = step(core)  # old's 9th token needs a third block: paused new is the newest
    assert core.preemptions == 1 and [s.id for s in core.waiting] == ["new"]
    assert core.waiting[0].state is SeqState.PAUSED and core.snapshot().paused == 1
    while core.num_admitted:  # old finishes; new stays paused in the queue
        step(core)
    assert core.num_waiting == 1 and core.pool.is_whole()
    core.resume("new")
    plan, events = step(core)
    # its prompt and its one token prefilled again, making its second
    assert [s.id for s in plan.prefills] == ["new"] and plan.features.prefill_tokens == 5
    events += drain(core)
    assert tokens_of(events, "new") == list(range(1, 8)) and core.is_drained()


def test_the_config_names_the_policy():
    assert type(Scheduler(SchedulerConfig(num_blocks=8, admission="optimistic")).admission) is Optimistic
    assert type(Scheduler(SchedulerConfig(num_blocks=8)).admission) is ReserveWhole
    with pytest.raises(ValueError, match="unknown admission policy 'lazy'; known: optimistic, reserve"):
        SchedulerConfig(num_blocks=8, admission="lazy")
    with pytest.raises(ValueError, match="names admission 'reserve', the policy given is 'optimistic'"):
        Scheduler(SchedulerConfig(num_blocks=8), Optimistic())
    with pytest.raises(ValueError, match="watermark"):
        Optimistic(watermark=1.0)
