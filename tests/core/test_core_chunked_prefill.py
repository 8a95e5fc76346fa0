"""Chunked prefill: a prompt longer than the step's prefill budget is prefilled a
chunk per step beside the running decodes, and makes its first token with the
last chunk."""
import pytest

from scheduler import (FinishEvent, FinishReason, Optimistic, Request, SchedulerConfig, SeqState,
                       TokenEvent)

from core_helpers import drain, finishes, make_core, step, tokens_of


def chunked_core(budget=4, **kw):
    return make_core(max_prefill_tokens=budget, chunked_prefill=True, **kw)


def test_chunked_prefill_needs_a_budget():
    with pytest.raises(ValueError, match="needs max_prefill_tokens"):
        SchedulerConfig(num_blocks=8, chunked_prefill=True)
    with pytest.raises(ValueError, match="at least 1"):
        SchedulerConfig(num_blocks=8, max_prefill_tokens=0)


def test_a_long_prompt_is_prefilled_a_chunk_a_step_beside_the_decodes():
    core = chunked_core(budget=4)
    core.submit(Request("a", 2, 8))
    step(core)                                   # a's prompt fits one step
    core.submit(Request("b", 10, 2))
    rows = []
    for _ in range(3):
        plan, events = step(core)
        rows.append(([s.id for s in plan.decodes], [s.id for s in plan.partials],
                     [s.id for s in plan.prefills], plan.features.prefill_tokens,
                     plan.features.prefill_tokens_sq, plan.features.prefix_tokens,
                     [(e.seq_id, e.index) for e in events if isinstance(e, TokenEvent)]))
    # chunks of 4, 4 and 2 tokens; each attends to itself and what came before it,
    # which it reads back from the cache
    assert rows == [
        (["a"], ["b"], [], 4, 4 * 4, 0, [("a", 1)]),
        (["a"], ["b"], [], 4, 4 * 8, 4, [("a", 2)]),
        (["a"], [], ["b"], 2, 2 * 10, 8, [("b", 0), ("a", 3)]),
    ]
    seq = core.sequence("b")
    assert seq.prefill_left == 0 and seq.num_tokens == 11
    plan, _ = step(core)
    assert [s.id for s in plan.decodes] == ["a", "b"]  # b decodes from the step after its last chunk
    drain(core)
    assert core.is_drained()


def test_a_prompt_whole_in_one_step_matches_an_unchunked_core():
    chunked, plain = chunked_core(budget=64), make_core(max_prefill_tokens=64)
    for core in (chunked, plain):
        for i in range(3):
            core.submit(Request(f"r{i}", 5 + i, 4))
    plans = [step(core)[0] for core in (chunked, plain)]
    assert [[s.id for s in p.prefills] for p in plans] == [["r0", "r1", "r2"]] * 2
    assert plans[0].features == plans[1].features
    assert not plans[0].partials


def test_sequences_still_prefilling_go_first_and_new_ones_take_what_is_left():
    core = chunked_core(budget=6)
    core.submit(Request("a", 10, 2))
    core.submit(Request("b", 5, 2))
    core.submit(Request("c", 3, 2))
    chunks = []
    for _ in range(3):
        plan = core.plan()
        chunks.append([(s.id, s.prefill_start, s.chunk) for s in plan.chunks])
        core.commit(plan, [0] * len(plan.sequences))
    # each step's finishing chunks are listed first
    assert chunks == [
        [("a", 0, 6)],                     # a alone fills the budget
        [("a", 6, 4), ("b", 0, 2)],        # a's rest first, then b with what is left
        [("b", 2, 3), ("c", 0, 3)],
    ]
    assert [s.id for s in plan.prefills] == ["b", "c"]


def test_a_paused_prefill_waits_with_its_blocks_and_goes_on_when_resumed():
    core = chunked_core(budget=4)
    core.submit(Request("a", 12, 2))
    step(core)
    reserved = core.pool.reserved_blocks
    core.pause("a")
    plan, events = step(core)
    assert plan.is_empty and events == []
    assert core.sequence("a").prefill_left == 8 and core.pool.reserved_blocks == reserved
    core.resume("a")
    plan = step(core)[0]
    assert [(s.id, s.chunk) for s in plan.partials] == [("a", 4)]
    events = drain(core)
    assert tokens_of(events, "a") == [0, 1] and core.is_drained()


def test_cancel_mid_prefill_releases_its_blocks_and_makes_nothing():
    core = chunked_core(budget=4)
    core.submit(Request("a", 12, 2))
    core.submit(Request("b", 3, 2))
    step(core)
    core.cancel("a")
    plan, events = step(core)
    assert finishes(events) == {"a": FinishReason.CANCELLED}
    assert [e for e in events if isinstance(e, FinishEvent)][0].num_generated == 0
    assert [s.id for s in plan.chunks] == ["b"]
    drain(core)
    assert core.is_drained()
    assert core.pool.reservations == core.pool.releases == 2


def test_a_preempted_prefill_counts_its_computed_chunks_as_recomputed():
    # 4 blocks of 4. a holds two, full, and needs a third as b, its first chunk
    # computed, holds the other two; b is the newest, so b gives its blocks back
    core = chunked_core(budget=4, num_blocks=4, admission=Optimistic(watermark=0))
    core.submit(Request("a", 4, 12))
    for _ in range(4):
        step(core)                               # a: 4 prompt tokens and 4 made
    core.submit(Request("b", 8, 4))
    core.submit(Request("c", 1, 1))              # waits behind b
    plan, _ = step(core)
    assert [(s.id, s.chunk) for s in plan.partials] == [("b", 4)]
    plan, _ = step(core)
    assert [s.id for s in plan.preempted] == ["b"] and [s.id for s in plan.decodes] == ["a"]
    b = plan.preempted[0]
    assert b.state is SeqState.WAITING and b.lost_tokens == 4 and not b.output
    assert core.recomputed_tokens == 0           # counted when it is computed again
    events = drain(core)
    assert tokens_of(events, "b") == [0, 1, 2, 3]
    ends = {e.seq_id: e for e in events if isinstance(e, FinishEvent)}
    assert (ends["b"].preemptions, ends["b"].recomputed_tokens) == (1, 4)
    assert (core.preemptions, core.recomputed_tokens) == (1, 4)
    assert core.is_drained()
