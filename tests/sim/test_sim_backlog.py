"""Slow readers, transport buffers and the backlog policies, with times by hand.
Steps take 0.25 s; token events are 88 bytes, final events 84 (twinstep wire)."""
import random

import pytest

from scheduler import (BACKLOG_POLICIES, BacklogPolicy, Decision, Drop, Naive, Pause,
                       SchedulerConfig, SeqState, Unbounded, blocks_for, make_policy)
from sim import (WIRE_FORMATS, ConstantCost, Overheads, ReplayNotDrained, ReplaySetup,
                 build_setup, replay)
from traces.record import Client, LeaveHow, ReadMode, TraceRequest


def request(id, arrival=0.0, prompt=10, new=3, **client):
    return TraceRequest(id, arrival, prompt, new, client=Client(**client))


def slow(id, pause_s, new, prompt=10, **kw):
    return request(id, prompt=prompt, new=new, read=ReadMode.PER_EVENT, pause_s=pause_s, **kw)


def setup(policy, transport_bytes=0, cost=0.25, max_batch=8, **overheads):
    return ReplaySetup(SchedulerConfig(num_blocks=256, block_size=16, max_batch=max_batch),
                       ConstantCost(cost), policy,
                       Overheads(transport_bytes=transport_bytes, **overheads))


def test_drop_cancels_a_stalled_reader_as_slow_client_and_cuts_it_when_it_takes_nothing():
    # The reader takes token 0 at 0.25 and then sleeps 10 s. Token 1 fills the
    # connection (0 bytes: one event in flight); token 2 is queued at 0.75 and the
    # stall starts. At 2.0 it has lasted 1.25 s > 1 s: drop, applied at that plan.
    result = replay([slow("s", pause_s=10.0, new=100)], setup(Drop(stall_timeout_s=1.0)))
    (o,) = result.outcomes
    assert (o.finish_reason, o.tokens_generated) == ("slow_client", 8)
    assert result.series.time_s[-1] == 2.0 and result.series.running[-1] == 0
    # It takes nothing for the timeout after the drop either: at the watchdog's
    # first tick (every 0.25 s) after 3.0 the server drops its connection, and the
    # reader gets nothing more.
    assert (o.token_times_s, o.finish_s, o.tokens_read) == ([0.25], 3.25, 1)
    assert result.summary.dropped == 1


def test_a_dropped_reader_that_still_reads_takes_everything_queued_then_slow_client():
    # 88-byte token events at 88/1.5 B/s: each takes 1.5 s to read, longer than the
    # stall timeout, though the reader reads all along. It takes token 0 at 1.75;
    # token 1 leaves the server queue then, and token 2 waits from 1.75: the
    # watchdog's tick at 3.0 finds the stall 1.25 s > 1 s old, and the drop frees
    # the engine at the next plan. Token 11, made by the step that ends at 3.0, came
    # after the drop and is discarded. The reader is never cut: it reads the 11
    # tokens queued before the drop, one every 1.5 s, then the 84-byte slow_client
    # event.
    rate = 88 / 1.5
    trace = [request("s", new=100, read=ReadMode.BYTE_RATE, bytes_per_s=rate)]
    result = replay(trace, setup(Drop(stall_timeout_s=1.0)))
    (o,) = result.outcomes
    assert (o.finish_reason, o.tokens_generated, o.tokens_read) == ("slow_client", 12, 11)
    assert result.series.time_s[-1] == 3.0 and result.series.running[-1] == 0
    assert o.token_times_s == pytest.approx([0.25 + 1.5 * (k + 1) for k in range(11)])
    assert o.finish_s == pytest.approx(16.75 + 84 / rate)
    assert result.summary.dropped == 1


def test_pause_keeps_slot_and_blocks_then_resumes():
    # Reads every 0.875 s. Token 5 (at 1.5) makes 3 > 2 queued: paused at the plan of
    # 1.5. The queue empties when the reader takes token 4 at 3.75: resumed there.
    seen = {}

    def probe(env, core):
        yield env.timeout(3.0)
        seq = core.sequence("s")
        seen.update(summary=core.snapshot(), state=seq.state, made=len(seq.output))

    trace = [slow("s", pause_s=0.875, new=8, prompt=40)]
    result = replay(trace, setup(Pause(max_queued=2, resume_at=0)), probe=probe)
    assert seen["state"] is SeqState.PAUSED and seen["made"] == 6
    s = seen["summary"]
    assert (s.running, s.paused, s.blocks_reserved, s.blocks_used) == (0, 1, blocks_for(48, 16), 3)
    (o,) = result.outcomes
    assert o.token_times_s == [0.25, 1.125, 2.0, 2.875, 3.75, 4.625, 5.5, 6.375]
    assert (o.finish_s, o.finish_reason, o.tokens_generated) == (7.25, "length", 8)
    series = result.series
    assert series.time_s.tolist() == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.5, 4.0, 4.25]
    assert series.paused.tolist() == [0, 0, 0, 0, 0, 0, 1, 0, 0]
    assert series.tokens.tolist() == [1, 1, 1, 1, 1, 1, 0, 1, 1]


def test_naive_makes_every_stream_wait_for_the_slowest_reader():
    # a reads one event a second; b reads instantly and wants 16 tokens.
    trace = [slow("a", pause_s=1.0, new=4), request("b", new=16)]
    free = replay(trace, setup(Unbounded()))
    assert free.outcomes[1].finish_s == 4.0  # 16 steps back to back
    assert free.summary.makespan_s == 4.25  # a reads its final event at 4.25
    naive = replay(trace, setup(Naive()))
    a, b = naive.outcomes
    # a's token 2 waits in the server queue from 0.75 until a reads token 1 at 1.25;
    # after a's last step (1.5) its queue holds token 3 and the final event until
    # 3.25. b's remaining 12 tokens run from 3.25.
    assert b.token_times_s[:5] == [0.25, 0.5, 0.75, 1.5, 3.5]
    assert b.finish_s == 6.25 and a.finish_s == 4.25
    assert naive.summary.makespan_s == 6.25 > free.summary.makespan_s
    assert naive.summary.gap_p99_s > free.summary.gap_p99_s


@pytest.mark.parametrize("transport_bytes, peak_paused, last_step", [(100_000, 0, 10.0), (0, 1, None)])
def test_a_big_transport_buffer_absorbs_a_slow_readers_backlog(transport_bytes, peak_paused, last_step):
    trace = [slow("s", pause_s=0.5, new=40)]
    result = replay(trace, setup(Pause(max_queued=2), transport_bytes=transport_bytes))
    assert result.series.peak("paused") == peak_paused
    if last_step is not None:  # never paused: 40 steps back to back
        assert result.series.time_s[-1] == last_step
    (o,) = result.outcomes
    assert o.tokens_read == 40 and o.finish_s == pytest.approx(0.25 + 40 * 0.5)


def test_event_padding_fills_the_transport_sooner():
    # 1,000 bytes hold eleven 88-byte events, but only one padded to 88 + 504.
    trace = [slow("s", pause_s=0.5, new=40)]
    plain = replay(trace, setup(Pause(max_queued=2), transport_bytes=1000))
    padded = replay(trace, ReplaySetup(
        SchedulerConfig(num_blocks=256, block_size=16, max_batch=8), ConstantCost(0.25),
        Pause(max_queued=2), Overheads(transport_bytes=1000),
        WIRE_FORMATS["twinstep"].padded(500)))
    assert plain.series.peak("paused") == padded.series.peak("paused") == 1
    first_pause = [next(t for t, p in zip(r.series.time_s, r.series.paused) if p)
                   for r in (plain, padded)]
    assert first_pause[1] < first_pause[0]
    for r in (plain, padded):
        (o,) = r.outcomes
        assert o.tokens_read == 40 and o.finish_s == pytest.approx(0.25 + 40 * 0.5)


def test_padding_adds_a_comment_line_to_every_event():
    wire = WIRE_FORMATS["openai"]
    assert wire.padded(0) == wire
    padded = wire.padded(100)
    assert (padded.token_bytes, padded.final_bytes) == (wire.token_bytes + 104, wire.final_bytes + 104)
    assert build_setup(ConstantCost(1.0), wire="openai", event_padding=100, num_blocks=8).wire == padded
    with pytest.raises(ValueError, match="event_padding must be >= 0"):
        wire.padded(-1)


def test_a_byte_rate_reader_takes_bytes_over_rate_per_event():
    # 880 B/s: a 88-byte token event takes 0.1 s, the 84-byte final event 84/880 s.
    trace = [request("s", new=5, read=ReadMode.BYTE_RATE, bytes_per_s=880.0)]
    (o,) = replay(trace, setup(Unbounded(), transport_bytes=100_000, cost=0.01)).outcomes
    assert o.token_times_s == pytest.approx([0.01 + 0.1 * k for k in range(1, 6)])
    assert o.finish_s == pytest.approx(0.51 + 84 / 880)


def test_a_replay_that_leaves_a_sequence_paused_forever_raises():
    class PauseForever(BacklogPolicy):
        name = "pause_forever"

        def decide(self, backlog, now):
            return Decision.CONTINUE if backlog.paused or not backlog.queued_events else Decision.PAUSE

    with pytest.raises(ReplayNotDrained, match="not drained"):
        replay([slow("s", pause_s=1.0, new=10)], setup(PauseForever()))


@pytest.mark.parametrize("policy", sorted(BACKLOG_POLICIES))
def test_the_core_is_drained_after_a_replay_full_of_leavers_and_slow_readers(policy):
    rng = random.Random(policy)
    trace = []
    for i in range(150):
        kind = rng.random()
        client = Client()
        if kind < 0.2:
            client = Client(read=ReadMode.PER_EVENT, pause_s=rng.choice([0.01, 0.1, 1.0]))
        elif kind < 0.3:
            client = Client(read=ReadMode.BYTE_RATE, bytes_per_s=rng.choice([500.0, 5000.0]))
        if rng.random() < 0.25:
            client = Client(client.read, client.pause_s, client.bytes_per_s,
                            leave_after_tokens=rng.randint(0, 20),
                            leave_after_s=rng.choice([None, rng.uniform(0, 3)]),
                            leave_how=rng.choice(list(LeaveHow)))
        trace.append(TraceRequest(f"r{i}", i * 0.02, rng.randint(1, 300), rng.randint(1, 120),
                                  client=client))
    result = replay(trace, ReplaySetup(
        SchedulerConfig(num_blocks=200, block_size=16, max_batch=16, max_waiting=40),
        ConstantCost(0.01), make_policy(policy, max_queued=4, stall_timeout_s=0.4),
        Overheads(request_s=0.003, delivery_s=0.001, disconnect_detect_s=0.02,
                  transport_bytes=1000)))  # replay() raises if anything is left over
    assert sum(result.series.tokens) == sum(o.tokens_generated for o in result.outcomes)
    s = result.summary
    # The paths under test were taken (a naive engine mostly waits on slow readers,
    # so it makes next to nothing after a client leaves).
    assert s.left > 0 and (s.wasted_tokens > 0 or policy == "naive")
    assert (s.dropped > 0) == (policy in ("drop", "pause_then_drop"))
    assert (s.peak_paused > 0) == (policy in ("pause", "pause_then_drop"))
    for o in result.outcomes:
        assert o.finish_s is not None
        assert o.tokens_read == len(o.token_times_s) <= o.tokens_generated
        assert o.token_times_s == sorted(o.token_times_s)
        assert o.tokens_after_leave <= o.tokens_generated
        if o.refused is None and o.left_s is None:
            assert o.finish_reason in ("length", "slow_client")
