"""The core keeps its decode batch, its context and its counts of paused sequences
from step to step instead of scanning for them: under random interleavings of
wishes, steps, executor-ended sequences and plans left uncommitted (a failed step),
every plan and every count equals what a scan of the sequences gives."""
from hypothesis import given, settings, strategies as st

from scheduler import FinishReason, QueueFull, Request, RequestTooLarge, SeqState, blocks_for

from core_helpers import make_core

# Wishes name one of the first requests, so that most of them reach a running one.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 40), st.integers(1, 30)),
        st.tuples(st.sampled_from(["cancel", "pause", "resume"]), st.integers(0, 8)),
        st.tuples(st.just("step"), st.sets(st.integers(0, 30), max_size=1)),
        st.tuples(st.just("uncommitted"), st.just(0)),
    ),
    min_size=10,
    max_size=120,
)


def scanned_decodes(core, prefills):
    return [s for s in core.running
            if s.state is SeqState.RUNNING and s.output and s not in prefills]


def check_counts(core):
    states = [s.state for s in core.running]
    waiting = [s.state for s in core.waiting]
    summary = core.snapshot()
    assert core.num_paused == states.count(SeqState.PAUSED)
    assert summary.running == states.count(SeqState.RUNNING)
    assert summary.waiting == waiting.count(SeqState.WAITING)
    assert summary.paused == states.count(SeqState.PAUSED) + waiting.count(SeqState.PAUSED)


def check_plan(core, plan, block_size):
    expected = scanned_decodes(core, plan.prefills)
    assert plan.decodes == expected
    assert plan.features.decode_batch == len(expected)
    assert plan.features.context_tokens == sum(s.num_tokens for s in expected)
    assert plan.features.prefill_tokens == sum(s.prompt_len for s in plan.prefills)
    for s in plan.decodes:
        assert len(s.block_table) == blocks_for(s.num_tokens, block_size)


@settings(max_examples=300, deadline=None)
@given(ops=ops, block_size=st.integers(1, 8), max_batch=st.integers(1, 6))
def test_plans_and_counts_equal_a_scan_of_the_sequences(ops, block_size, max_batch):
    core = make_core(num_blocks=60, block_size=block_size, max_batch=max_batch, max_waiting=12)
    n = 0
    for op in ops:
        if op[0] == "submit":
            try:
                core.submit(Request(f"r{n}", op[1], op[2]))
            except (QueueFull, RequestTooLarge):
                pass
            n += 1
        elif op[0] in ("step", "uncommitted"):
            plan = core.plan()
            check_plan(core, plan, block_size)
            if op[0] == "step":
                ends = {s.id: FinishReason.EOS for s in plan.sequences if int(s.id[1:]) in op[1]}
                core.commit(plan, [3] * len(plan.sequences), ends)
            else:  # the executor failed: its sequences are cancelled, nothing committed
                for s in plan.sequences:
                    core.cancel(s.id, FinishReason.ERROR)
        else:
            getattr(core, op[0])(f"r{op[1]}")
        check_counts(core)

