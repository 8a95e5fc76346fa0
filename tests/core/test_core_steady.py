"""Steady runs, for a driver that makes no real tokens: `commit_steady(k)` leaves
the core as k plans and commits of the same decode batch would, blocks grown and
tables marked full alike, and `steady` offers a run only when nothing but those
decodes could happen."""
import pytest

from core_helpers import drain, finishes, make_core, step
from scheduler import FinishEvent, Optimistic, Request


def running_core(**kw):
    core = make_core(num_blocks=64, block_size=4, max_batch=8, **kw)
    for i, new in enumerate((30, 17, 9)):
        core.submit(Request(f"r{i}", 3 + i, new))
    step(core)  # admitted and prefilled
    step(core)  # decoded: the batch stands
    for seq in core.running:
        seq.emits_tokens = False
    return core


def state(core):
    seqs = sorted(core.running, key=lambda s: s.id)
    return ([(s.id, len(s.output), s.num_tokens, len(s.block_table)) for s in seqs],
            sorted(s.id for s in core._batch.full), core.snapshot())


@pytest.mark.parametrize("steps", [1, 3, 6])
def test_a_steady_run_leaves_the_core_as_its_steps_would(steps):
    stepped, run = running_core(), running_core()
    batch, context, room = run.steady()
    assert (batch, context) == (3, sum(s.num_tokens for s in run.running))
    assert room == 9 - 2 - 1  # r2 has made 2 of its 9 tokens; the 9th ends it
    for _ in range(steps):
        plan, events = step(stepped)
        assert [e for e in events if isinstance(e, FinishEvent)] == []
    run.commit_steady(steps)
    assert state(run) == state(stepped)
    assert finishes(drain(run)) == finishes(drain(stepped))
    assert run.is_drained() and stepped.is_drained()


def test_no_run_while_anything_but_the_batch_could_change():
    core = running_core()
    core.submit(Request("late", 3, 3))  # a wish
    assert core.steady() is None
    step(core)  # admitted: its tokens are events
    assert core.steady() is None
    preempting = running_core(admission=Optimistic())
    assert preempting.steady() is None
    drain(core)
    drain(preempting)
