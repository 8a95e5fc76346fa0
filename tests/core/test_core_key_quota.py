"""Per-key limits in the core: what a key holds (streams until they finish, waiting
requests until their first admission) is counted at submit and given back exactly
once, whatever ends the request."""
import pytest

from core_helpers import drain, finishes, make_core, step
from scheduler import FinishReason, KeyHolding, KeyLimitReached, Optimistic, QueueFull, Request


def keyed(i, key, prompt=5, new=3):
    return Request(f"r{i}", prompt, new, key=key)


def test_a_key_at_its_stream_limit_is_refused_and_others_are_not():
    core = make_core(max_streams_per_key=2)
    core.submit(keyed(0, "alice"))
    core.submit(keyed(1, "alice"))
    with pytest.raises(KeyLimitReached) as refused:
        core.submit(keyed(2, "alice"))
    assert (refused.value.key, refused.value.what, refused.value.limit) == ("alice", "streams", 2)
    core.submit(keyed(3, "bob"))
    core.submit(Request("anonymous", 5, 3))  # no key: never counted
    assert core.keys.holding() == {"alice": KeyHolding(2, 2), "bob": KeyHolding(1, 1)}
    step(core)
    assert core.keys.holding() == {"alice": KeyHolding(2, 0), "bob": KeyHolding(1, 0)}
    drain(core)
    assert core.keys.holding() == {}
    core.submit(keyed(2, "alice"))  # room again once its streams finished
    drain(core)
    assert core.is_drained()


def test_the_waiting_limit_counts_until_the_first_admission():
    core = make_core(max_batch=1, max_waiting_per_key=1)
    core.submit(keyed(0, "alice", new=4))
    with pytest.raises(KeyLimitReached, match="waiting requests"):
        core.submit(keyed(1, "alice"))
    step(core)  # r0 admitted: alice waits for nothing
    core.submit(keyed(1, "alice"))
    assert core.keys.holding() == {"alice": KeyHolding(2, 1)}
    with pytest.raises(KeyLimitReached):
        core.submit(keyed(2, "alice"))
    drain(core)
    assert core.keys.is_empty() and core.is_drained()


@pytest.mark.parametrize("when", ["waiting", "running", "paused"])
def test_a_cancel_gives_back_what_the_key_held(when):
    core = make_core(max_batch=1, max_streams_per_key=1)
    core.submit(keyed(0, "alice", new=50))
    if when != "waiting":
        step(core)
    if when == "paused":
        core.pause("r0")
        step(core)
    core.cancel("r0")
    _, events = step(core)
    assert finishes(events) == {"r0": FinishReason.CANCELLED}
    assert core.keys.is_empty()
    core.submit(keyed(1, "alice"))
    drain(core)
    assert core.is_drained()


def test_a_refusal_for_a_full_queue_takes_nothing_from_the_key():
    core = make_core(max_waiting=1, max_streams_per_key=5)
    core.submit(keyed(0, "alice"))
    with pytest.raises(QueueFull):
        core.submit(keyed(1, "alice"))
    assert core.keys.holding() == {"alice": KeyHolding(1, 1)}
    drain(core)
    assert core.keys.is_empty()


def test_a_preempted_request_is_not_waiting_again_for_its_key():
    core = make_core(num_blocks=6, block_size=4, max_batch=4, admission=Optimistic(),
                     max_waiting_per_key=2)
    for i in range(3):
        core.submit(keyed(i, "alice" if i < 2 else "bob", prompt=4, new=12))
    while core.has_work():
        step(core)
        holding = core.keys.holding()
        waiting_now = {s.request.key for s in core.waiting if not s.preemptions}
        for key, held in holding.items():
            assert held.waiting == sum(1 for s in core.waiting
                                       if s.request.key == key and not s.preemptions)
        assert set(k for k, h in holding.items() if h.waiting) == waiting_now
    assert core.preemptions > 0
    assert core.keys.is_empty() and core.is_drained()


def test_limits_below_one_are_refused():
    with pytest.raises(ValueError, match="max_streams_per_key"):
        make_core(max_streams_per_key=0)
    with pytest.raises(ValueError, match="max_waiting_per_key"):
        make_core(max_waiting_per_key=0)
