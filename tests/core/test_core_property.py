"""Random interleavings of wishes and steps: the pool stays consistent and whole."""
from hypothesis import given, settings, strategies as st

from collections import Counter

from scheduler import ADMISSION_POLICIES, FinishEvent, FinishReason, KeyHolding, SeqState

from core_helpers import make_core, play, workloads



@settings(max_examples=300, deadline=None)
@given(ops=workloads(20, 12, 3), num_blocks=st.integers(4, 24), block_size=st.integers(1, 8),
       max_batch=st.integers(1, 6), policy=st.sampled_from(sorted(ADMISSION_POLICIES)),
       chunk_budget=st.one_of(st.none(), st.integers(1, 16)),
       key_streams=st.one_of(st.none(), st.integers(1, 4)),
       key_waiting=st.one_of(st.none(), st.integers(1, 3)))
def test_random_interleavings_keep_the_pool_whole(ops, num_blocks, block_size, max_batch, policy,
                                                  chunk_budget, key_streams, key_waiting):
    core = make_core(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                     max_waiting=10, admission=ADMISSION_POLICIES[policy](), max_overtakes=0,
                     max_prefill_tokens=chunk_budget, chunked_prefill=chunk_budget is not None,
                     max_streams_per_key=key_streams, max_waiting_per_key=key_waiting)
    released = []
    original = core.pool.release
    core.pool.release = lambda seq_id: (released.append(seq_id), original(seq_id))[1]
    admitted_order, finished = [], {}

    def do_step(stop_at):
        plan = core.plan()
        admitted_order.extend(s.id for s in plan.admitted)
        assert [s for s in plan.chunks if not s.prefill_start] == plan.admitted
        for s in plan.sequences + plan.partials:
            assert s.state is SeqState.RUNNING
            assert len(s.block_table) * block_size >= s.num_tokens
            assert len(s.block_table) <= s.reserved
        for s in plan.prefills:
            assert s.chunk == s.prefill_left > 0
        for s in plan.partials:
            assert 0 < s.chunk < s.prefill_left
        assert all(not s.prefill_left for s in plan.decodes)
        if chunk_budget is not None:
            assert plan.features.prefill_tokens == sum(s.chunk for s in plan.chunks) <= chunk_budget
        ends = {s.id: FinishReason.STOP for s in plan.sequences if int(s.id[1:]) in stop_at}
        for e in core.commit(plan, [7] * len(plan.sequences), ends):
            if isinstance(e, FinishEvent):
                assert e.seq_id not in finished
                finished[e.seq_id] = e.reason
        summary = core.snapshot()
        assert summary.blocks_free + summary.blocks_reserved == num_blocks
        assert sum(s.reserved for s in core.running) == summary.blocks_reserved
        assert all(not s.reserved and not s.block_table for s in core.waiting)
        assert len(core.running) <= max_batch
        assert core.pool.used_blocks <= core.pool.reserved_blocks
        # each key holds its unfinished requests, and waits for those never admitted
        streams = Counter(s.request.key for s in core.running + core.waiting)
        waiting = Counter(s.request.key for s in core.waiting if not s.preemptions)
        assert core.keys.holding() == {k: KeyHolding(n, waiting[k]) for k, n in streams.items()}
        assert all(n <= (key_streams or n) for n in streams.values())

    accepted = play(core, ops, do_step)
    assert core.is_drained()
    assert set(finished) == set(accepted)
    # a release for every admission: once each, and again for each preemption
    assert sorted(released) == sorted(admitted_order)
    assert len(released) - len(set(released)) == core.preemptions
    # first admissions in arrival order, except past requests paused while waiting
    paused_ever = {f"r{op[1]}" for op in ops if op[0] == "pause"}
    plain = [r for r in dict.fromkeys(admitted_order) if r not in paused_ever]
    assert plain == sorted(plain, key=lambda r: int(r[1:]))
