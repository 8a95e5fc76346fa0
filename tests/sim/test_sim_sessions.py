"""Closed-loop replays: a session sends its next request its think time after its
client was done with the one before, so a slow reader delays its own next request
and N users never have more than N requests out."""
import dataclasses

from scheduler import SchedulerConfig
from sim import ConstantCost, ReplaySetup, replay
from traces.record import Client, ReadMode, TraceRequest
from traces.synthetic.conversations import conversations
from traces.synthetic.lengths import Fixed, Uniform

STEP_S = 0.1
SETUP = ReplaySetup(SchedulerConfig(num_blocks=256, block_size=16, max_batch=4), ConstantCost(STEP_S))


def done_s(o):
    return o.left_s if o.left_s is not None else o.finish_s


def test_each_turn_goes_its_think_time_after_the_client_was_done_with_the_one_before():
    trace = conversations(users=1, turns=3, think_s=0.5, prompt_lengths=Fixed(8),
                          output_lengths=Fixed(4))
    slow = [dataclasses.replace(r, client=Client(read=ReadMode.PER_EVENT, pause_s=0.3))
            for r in trace]
    for requests in (trace, slow):
        t0, t1, t2 = replay(requests, SETUP).outcomes
        assert t0.arrival_s == 0.0
        assert t1.arrival_s == done_s(t0) + 0.5 and t2.arrival_s == done_s(t1) + 0.5
    fast, slowed = replay(trace, SETUP).outcomes, replay(slow, SETUP).outcomes
    # the slow reader is done later with each turn, so its next turn comes later
    assert all(s.arrival_s > f.arrival_s for s, f in zip(slowed[1:], fast[1:]))
    assert slowed[1].arrival_s - fast[1].arrival_s >= 3 * 0.3


def test_n_users_never_have_more_than_n_requests_out():
    trace = conversations(users=6, turns=5, think_s=0.2, prompt_lengths=Uniform(8, 64),
                          output_lengths=Uniform(2, 30), seed=4)
    result = replay(trace, SETUP)
    assert result.summary.completed == 30
    edges = sorted([(o.arrival_s, 1) for o in result.outcomes] +
                   [(done_s(o), -1) for o in result.outcomes])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak == 6
    by_user = {}
    for o in result.outcomes:
        by_user.setdefault(o.id.split("-")[0], []).append(o)
    for turns in by_user.values():
        for before, after in zip(turns, turns[1:]):
            assert after.arrival_s == done_s(before) + 0.2


def test_open_loop_requests_beside_sessions_go_at_their_arrival():
    trace = conversations(users=2, turns=3, think_s=1.0, prompt_lengths=Fixed(8),
                          output_lengths=Fixed(3))
    opened = [TraceRequest(f"open-{i}", 0.25 * i, 8, 3) for i in range(8)]
    mixed = sorted(trace + opened, key=lambda r: r.arrival_s)
    result = replay(mixed, SETUP)
    arrivals = {o.id: o.arrival_s for o in result.outcomes}
    assert [arrivals[f"open-{i}"] for i in range(8)] == [0.25 * i for i in range(8)]
    assert arrivals["u0-t1"] > 1.0 and arrivals["u1-t2"] > arrivals["u1-t1"] + 1.0
