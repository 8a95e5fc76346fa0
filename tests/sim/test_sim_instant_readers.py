"""Instant readers take their tokens as the steps deliver them, without a reading
process: their records must equal those of readers that take every event the moment
it arrives through a reading process. And every accepted or refused request gets its
response headers when the server has it, after the per-request overhead."""
import random

import pytest

from scheduler import Pause, SchedulerConfig
from sim import LinearCost, Overheads, ReplaySetup, replay
from traces.record import Client, LeaveHow, ReadMode, TraceRequest


def mixed_trace(read: ReadMode, seed: int = 3) -> list[TraceRequest]:
    """Stayers, leavers after some tokens (some after exactly their last one), after
    some seconds, and one that leaves before its request is sent."""
    rng = random.Random(seed)
    trace, t = [], 0.0
    for i in range(80):
        t += rng.expovariate(40.0)
        new = rng.randint(1, 40)
        leave = rng.choice([{}, {}, {"leave_after_tokens": rng.randint(1, 45)},
                            {"leave_after_tokens": new},
                            {"leave_after_s": round(rng.uniform(0.05, 1.5), 4)}])
        if i == 17:
            leave = {"leave_after_s": 0.001}  # gone before the request is sent
        client = Client(read=read, **leave,
                        leave_how=LeaveHow.RST if leave else LeaveHow.FIN)
        trace.append(TraceRequest(f"r{i}", round(t, 4), rng.randint(4, 300), new, client=client))
    return trace


def setup(max_waiting: int = 1024, admission: str = "reserve", num_blocks: int = 300) -> ReplaySetup:
    # Steps of uneven length; a delivery delay; room for 6 sequences at once.
    return ReplaySetup(SchedulerConfig(num_blocks=num_blocks, block_size=16, max_batch=6,
                                       max_waiting=max_waiting, admission=admission),
                       LinearCost(fixed=0.0113, prefill_tokens=3e-5, decode_batch=7e-4),
                       Pause(max_queued=4),
                       Overheads(request_s=0.0031, delivery_s=0.0017, disconnect_detect_s=0.0053))


# Optimistic admission on a small pool preempts: an instant reader's tokens then
# come in runs of consecutive steps with gaps between.
@pytest.mark.parametrize("admission, num_blocks", [("reserve", 300), ("optimistic", 40)])
def test_instant_readers_read_as_readers_that_take_each_event_at_once(admission, num_blocks):
    instant = replay(mixed_trace(ReadMode.INSTANT), setup(12, admission, num_blocks))
    # A per-event reader that never pauses takes each event when it lands.
    at_once = replay(mixed_trace(ReadMode.PER_EVENT), setup(12, admission, num_blocks))
    outcomes = instant.outcomes
    assert outcomes == at_once.outcomes
    assert instant.series.rows() == at_once.series.rows()
    assert (instant.summary.preemptions > 0) == (admission == "optimistic")
    # The mix covers what the comparison is for.
    assert sum(o.refused is not None for o in outcomes) > 0
    left = [o for o in outcomes if o.left_s is not None]
    assert any(0 < o.tokens_read < o.max_new_tokens for o in left)
    assert any(o.tokens_read == o.max_new_tokens and o.finish_reason == "length" for o in left)
    assert any(o.tokens_after_leave > 0 for o in left)
    read_to_end = [o for o in outcomes if o.left_s is None and o.refused is None]
    assert all(o.tokens_read == o.tokens_generated == len(o.token_times_s) for o in read_to_end)
    assert all(o.first_token_client_s == o.token_times_s[0] for o in read_to_end)


def test_token_times_are_the_delivery_times_of_consecutive_steps():
    # Every step makes a token for each running sequence; a reader that stays reads
    # each one the delivery delay after its step ends.
    result = replay(mixed_trace(ReadMode.INSTANT), setup())
    step_ends = [t for t, tokens in zip(result.series.time_s, result.series.tokens) if tokens]
    delivered = [t + 0.0017 for t in step_ends]
    for o in result.outcomes:
        if o.tokens_read:
            first = delivered.index(o.first_token_engine_s + 0.0017)
            assert o.token_times_s == delivered[first:first + o.tokens_read]


def test_headers_arrive_after_the_request_overhead_one_request_at_a_time_refusals_included():
    # the server's front takes requests in one after another: of three that arrive
    # together the second follows the first by front_s, the third follows the second
    trace = [TraceRequest("a", 0.0, 10, 3), TraceRequest("b", 0.0, 10, 3),
             TraceRequest("d", 0.0, 10, 3),
             TraceRequest("c", 0.125, 10, 3, client=Client(leave_after_s=0.0625))]
    overheads = Overheads(request_s=0.25, front_s=0.125, wake_s=0.0625)
    result = replay(trace, ReplaySetup(SchedulerConfig(num_blocks=8, max_batch=1, max_waiting=1),
                                       LinearCost(fixed=1.0), overheads=overheads))
    a, b, d, c = result.outcomes
    # a alone wakes the engine, whose first step starts wake_s later (its three steps
    # end at 3.3125); b waits, d is refused
    assert (a.headers_s, a.refused, a.admitted_s, a.first_token_client_s) == (0.25, None, 0.3125, 1.3125)
    assert (b.headers_s, b.refused, b.admitted_s) == (0.375, None, 3.3125)
    assert (d.headers_s, d.refused) == (0.5, "queue_full")
    assert (c.headers_s, c.left_s, c.admitted_s) == (None, 0.1875, None)


def test_what_reaches_an_idle_engine_while_it_wakes_joins_its_first_step():
    trace = [TraceRequest(name, 0.0, 10, 3) for name in "abcd"]
    overheads = Overheads(request_s=0.25, front_s=0.125, wake_s=0.1875)
    result = replay(trace, ReplaySetup(SchedulerConfig(num_blocks=16, max_batch=4),
                                       LinearCost(fixed=1.0), overheads=overheads))
    # in at 0.25 and 0.375, a and b make the step that starts at 0.4375; c and d, in
    # at 0.5 and 0.625, wait for it to end
    assert [o.headers_s for o in result.outcomes] == [0.25, 0.375, 0.5, 0.625]
    assert [o.admitted_s for o in result.outcomes] == [0.4375, 0.4375, 1.4375, 1.4375]
    assert [o.first_token_engine_s for o in result.outcomes] == [1.4375, 1.4375, 2.4375, 2.4375]
