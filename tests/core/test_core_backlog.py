import pytest

from scheduler import Backlog, Decision, Drop, Naive, Pause, PauseThenDrop, Unbounded, make_policy

C, P, R, D = Decision.CONTINUE, Decision.PAUSE, Decision.RESUME, Decision.DROP


def run(policy, script):
    """script: (now, queued, last_read, paused) -> decisions."""
    return [policy.decide(Backlog(q, q * 100, last, paused), now) for now, q, last, paused in script]


def test_naive_and_unbounded_always_continue():
    script = [(t, q, 0.0, False) for t, q in [(0, 0), (1, 100), (100, 10_000)]]
    assert run(Naive(), script) == [C, C, C]
    assert run(Unbounded(), script) == [C, C, C]
    assert Naive().engine_waits and not Unbounded().engine_waits


def test_pause_with_hysteresis():
    policy = Pause(max_queued=4, resume_at=1)
    script = [(0, 4, 0, False), (1, 5, 0, False), (2, 3, 0, True), (3, 2, 0, True), (4, 1, 0, True),
              (5, 0, 0, False)]
    assert run(policy, script) == [C, P, C, C, R, C]
    assert Pause(max_queued=10).decide(Backlog(5, 0, 0, True), 0) == R  # default: half


def test_drop_after_stall_timeout_only_with_events_waiting():
    policy = Drop(stall_timeout_s=2.0)
    script = [(1.0, 3, 0.0, False), (2.0, 3, 0.0, False), (2.01, 3, 0.0, False),
              (50.0, 0, 0.0, False), (50.0, 1, 49.0, False)]
    assert run(policy, script) == [C, C, D, C, C]


def test_pause_then_drop_two_thresholds():
    policy = PauseThenDrop(max_queued=4, stall_timeout_s=3.0)
    script = [
        (0.0, 3, 0.0, False),   # below the queue threshold
        (1.0, 5, 0.0, False),   # over it: pause
        (2.0, 5, 0.0, True),    # paused, stalled 2 s: hold
        (3.5, 5, 0.0, True),    # stall outlasts the timeout: drop
        (3.5, 2, 3.0, True),    # the reader took one at 3.0: resume instead
    ]
    assert run(policy, script) == [C, P, C, D, R]


def test_make_policy_by_name_ignores_foreign_settings():
    p = make_policy("pause", max_queued=8, stall_timeout_s=1.0)
    assert p == Pause(max_queued=8)
    assert make_policy("drop", max_queued=8, stall_timeout_s=1.0) == Drop(stall_timeout_s=1.0)
    with pytest.raises(ValueError, match="unknown backlog policy"):
        make_policy("fastest")
    with pytest.raises(ValueError):
        Pause(max_queued=4, resume_at=4)


@pytest.mark.parametrize("timeout, interval", [(0.02, 0.01), (0.2, 0.05), (2.0, 0.5), (30.0, 1.0)])
def test_policies_that_drop_name_their_watchdog_tick(timeout, interval):
    # A quarter of the timeout, between 10 ms and 1 s.
    assert Drop(stall_timeout_s=timeout).stall_check_interval_s == interval
    assert PauseThenDrop(stall_timeout_s=timeout).stall_check_interval_s == interval


def test_policies_that_never_drop_need_no_watchdog():
    for policy in (Naive(), Unbounded(), Pause()):
        assert policy.stall_check_interval_s is None


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_a_stall_timeout_must_be_positive(timeout):
    for name in ("drop", "pause_then_drop"):
        with pytest.raises(ValueError, match="stall_timeout_s must be positive"):
            make_policy(name, stall_timeout_s=timeout)
