"""A server's resume grace on the virtual clock: a stream whose client left keeps
its slot and blocks, paused, until the grace runs out, as the live server keeps it
for a GET that never comes."""
import pytest

from sim import ConstantCost, build_setup, replay
from traces import Client, LeaveHow, TraceRequest


def trace():
    return [TraceRequest("a", 0.0, 10, 8, client=Client(leave_after_tokens=2, leave_how=LeaveHow.RST)),
            TraceRequest("b", 0.0, 10, 3)]


@pytest.mark.parametrize("grace, b_admitted", [(0.0, 2.0), (3.0, 5.0)])
def test_a_leaver_holds_its_slot_for_the_grace(grace, b_admitted):
    # One slot, a step a second: a reads two tokens (at 1 and 2 s) and leaves.
    result = replay(trace(), build_setup(ConstantCost(1.0), max_batch=1, num_blocks=64,
                                         resume_grace_s=grace))
    a, b = result.outcomes
    assert (a.left_s, a.tokens_read, a.tokens_generated, a.finish_reason) == (2.0, 2, 2, "cancelled")
    assert a.tokens_after_leave == 0  # paused or cancelled at the next step alike
    assert b.admitted_s == b_admitted
    assert b.token_times_s == [b_admitted + 1, b_admitted + 2, b_admitted + 3]
    # while a waited out its grace, the engine held it paused and made nothing
    rows = result.series.rows()
    assert max(r["paused"] for r in rows) == (1 if grace else 0)


def test_a_negative_grace_is_refused():
    with pytest.raises(ValueError, match="resume_grace_s must be >= 0"):
        build_setup(ConstantCost(1.0), num_blocks=64, resume_grace_s=-1.0)
