"""The simulated hub watches stalls on a timer, as the live hub does: a stalled
reader is dropped at the first watchdog tick (a multiple of the policy's
`stall_check_interval_s` on the virtual clock) after its stall outlasts the
timeout, even when no step runs to deliver anything, and never later than the
first delivery that would see it; one that then takes nothing for the timeout
more is cut at the first tick after that. Steps take the given cost; one event in
flight per connection (no transport buffer)."""
import pytest

from scheduler import Drop, FinishReason, PauseThenDrop, SchedulerConfig
from sim import ConstantCost, Overheads, ReplaySetup, replay
from traces.record import Client, ReadMode, TraceRequest

NUM_BLOCKS = 64


def slow(id, pause_s, new):
    return TraceRequest(id, 0.0, 10, new, client=Client(read=ReadMode.PER_EVENT, pause_s=pause_s))


def fast(id, new):
    return TraceRequest(id, 0.0, 10, new)


def setup(policy, cost):
    return ReplaySetup(SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=16, max_batch=8),
                       ConstantCost(cost), policy, Overheads(transport_bytes=0))


class Watch:
    """A probe that keeps the replay's core and notes when each cancel is asked for."""

    def __init__(self):
        self.core = None
        self.cancels: list[tuple[float, str, FinishReason]] = []

    def probe(self, env, core):
        self.core = core
        cancel = core.cancel

        def noted(seq_id, reason=FinishReason.CANCELLED):
            self.cancels.append((env.now, seq_id, reason))
            cancel(seq_id, reason)

        core.cancel = noted
        return
        yield

    def assert_whole(self, admitted: int) -> None:
        s = self.core.snapshot()
        assert (s.running, s.waiting, s.paused, s.inbox) == (0, 0, 0, 0)
        assert (s.blocks_free, s.blocks_reserved) == (NUM_BLOCKS, 0)
        assert self.core.pool.is_whole()
        assert (self.core.pool.reservations, self.core.pool.releases) == (admitted, admitted)


def test_a_paused_stream_whose_reader_stalls_is_dropped_while_the_engine_idles():
    # The reader takes token 0 at 0.25 and then sleeps 10 s. Token 1 fills the
    # connection; token 2 is queued at 0.75: the stall starts. Token 4 (1.25) makes
    # 3 > 2 queued: paused, and with nothing else running the engine sleeps. The
    # stall outlasts 1.1 s at 1.85; the watchdog ticks every 0.275 s, so the drop
    # comes at 1.925, long before the reader wakes at 10.25.
    policy = PauseThenDrop(max_queued=2, stall_timeout_s=1.1)
    assert policy.stall_check_interval_s == pytest.approx(0.275)
    watch = Watch()
    result = replay([slow("s", pause_s=10.0, new=100)], setup(policy, 0.25), probe=watch.probe)
    ((dropped_at, seq_id, reason),) = watch.cancels
    assert (seq_id, reason) == ("s", FinishReason.SLOW_CLIENT)
    stall_start, timeout, interval = 0.75, 1.1, policy.stall_check_interval_s
    assert stall_start + timeout < dropped_at <= stall_start + timeout + interval
    assert dropped_at == pytest.approx(7 * interval)
    (o,) = result.outcomes
    assert (o.finish_reason, o.tokens_generated) == ("slow_client", 5)
    # Nothing was made after the pause, and the cancel took effect at the drop.
    series = result.series
    assert sum(series.tokens) == 5
    assert max(t for t, n in zip(series.time_s, series.tokens) if n) == 1.25
    assert series.time_s[-1] == dropped_at and series.running[-1] == series.paused[-1] == 0
    # The reader, asleep since 0.25, makes no progress for the timeout after the
    # drop either: the first tick after 3.025 cuts it, and it takes nothing more.
    assert (o.token_times_s, o.tokens_read) == ([0.25], 1)
    assert o.finish_s == pytest.approx(12 * interval)
    assert result.summary.dropped == 1
    watch.assert_whole(admitted=1)


def test_a_paused_reader_that_keeps_reading_within_the_timeout_is_never_dropped():
    # It reads one event every 0.9 s, less than the 1 s timeout, so each take
    # restarts the stall; the engine idles paused in between. The watchdog's checks
    # find the stall younger than the timeout every time.
    policy = PauseThenDrop(max_queued=2, stall_timeout_s=1.0)
    watch = Watch()
    result = replay([slow("s", pause_s=0.9, new=30)], setup(policy, 0.25), probe=watch.probe)
    (o,) = result.outcomes
    assert (o.finish_reason, o.tokens_generated, o.tokens_read) == ("length", 30, 30)
    assert watch.cancels == []
    assert result.series.peak("paused") == 1
    watch.assert_whole(admitted=1)


@pytest.mark.parametrize("cost, timeout, dropped_at, tokens, cut_at", [
    # Steps of 0.75 s: the stall starts at 2.25 and outlasts 1 s at 3.25. The next
    # delivery is at 3.75; the watchdog (every 0.25 s) ticks at 3.5 and drops first,
    # while the step that ends at 3.75 still makes the stream's fifth token. The
    # reader, asleep since it took token 0, is cut at the first tick after 4.5.
    (0.75, 1.0, 3.5, 5, 4.75),
    # Steps of 0.375 s: the stall starts at 1.125 and outlasts 4 s at 5.125. The
    # delivery at 5.25 drops it before the watchdog's next tick (every 1 s) at 6;
    # the reader is cut at the first tick after 9.25.
    (0.375, 4.0, 5.25, 14, 10.0),
])
def test_drop_under_a_busy_engine_comes_at_the_earlier_of_delivery_and_watchdog(
        cost, timeout, dropped_at, tokens, cut_at):
    watch = Watch()
    trace = [slow("s", pause_s=20.0, new=100), fast("a", new=40), fast("b", new=40)]
    result = replay(trace, setup(Drop(stall_timeout_s=timeout), cost), probe=watch.probe)
    assert watch.cancels == [(dropped_at, "s", FinishReason.SLOW_CLIENT)]
    s, a, b = result.outcomes
    assert (s.finish_reason, s.tokens_generated) == ("slow_client", tokens)
    assert (s.token_times_s, s.tokens_read, s.finish_s) == ([cost], 1, cut_at)
    # The other streams ran on, step after step, to their full length.
    for other in (a, b):
        assert (other.finish_reason, other.tokens_read) == ("length", 40)
        assert other.token_times_s == [cost * k for k in range(1, 41)]
    watch.assert_whole(admitted=3)
