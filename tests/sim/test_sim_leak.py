"""The simulated server under the live leak test's mix: 300 streams, up to about 48
at once against a batch of 8; 35% read to the end, 50% leave after 0 to 40 tokens
(FIN or RST), 15% read slowly and leave after 3 or 10 tokens. Under every backlog
policy the pool is whole afterwards, nothing is running, waiting or paused, every
admitted sequence was released exactly once, and the tokens made for a stream after
its client left are bounded by the steps that began before the cancel took effect."""
import random
from collections import Counter

import pytest

from scheduler import BACKLOG_POLICIES, SchedulerConfig, make_policy
from sim import ConstantCost, Overheads, ReplaySetup, replay
from traces.record import Client, LeaveHow, ReadMode, TraceRequest

STEP_S = 0.02
DETECT_S = 0.05
"""From a client leaving to the cancel in the core's inbox."""
NUM_BLOCKS = 96
"""Fewer than 8 of the longest requests need (17 blocks each): blocks bind too."""
READERS, LEAVERS, SLOW = 105, 150, 45
WAVE, WAVE_EVERY_S = 48, 6.0
"""Requests arrive in waves of 48 within half a second, about when the last wave
has drained: up to about 48 streams in flight."""


def mix(seed: int = 0) -> list[TraceRequest]:
    """35% read to the end; 50% leave after 0 to 40 tokens (every count, by FIN and
    by RST); 15% read slowly (a pause per event, or a byte rate, both about 0.3 s an
    event) and leave after 3 or 10 tokens. Shuffled, so every kind comes in every wave."""
    rng = random.Random(seed)
    to_end = [Client()] * READERS
    leavers = [Client(leave_after_tokens=i % 41, leave_how=(LeaveHow.FIN, LeaveHow.RST)[i % 2])
               for i in range(LEAVERS)]
    reading = ({"read": ReadMode.PER_EVENT, "pause_s": 0.3},
               {"read": ReadMode.BYTE_RATE, "bytes_per_s": 300.0})
    slow = [Client(**reading[i // 4 % 2], leave_after_tokens=(3, 10)[i % 2],
                   leave_how=(LeaveHow.FIN, LeaveHow.RST)[i // 2 % 2]) for i in range(SLOW)]
    clients = to_end + leavers + slow
    rng.shuffle(clients)
    # More than 40 tokens each, so every leaver really leaves.
    return [TraceRequest(f"r{i}", round(i // WAVE * WAVE_EVERY_S + rng.uniform(0.0, 0.5), 6),
                         rng.randint(16, 200), rng.randint(41, 64), client=client)
            for i, client in enumerate(clients)]


class Watch:
    """A probe that keeps the replay's core and counts the pauses the hub asks for."""

    def __init__(self):
        self.core = None
        self.pauses = 0

    def probe(self, env, core):
        self.core = core
        pause = core.pause

        def counted(seq_id):
            self.pauses += 1
            pause(seq_id)

        core.pause = counted
        return
        yield


def run(policy: str):
    watch = Watch()
    setup = ReplaySetup(
        SchedulerConfig(num_blocks=NUM_BLOCKS, block_size=16, max_batch=8),
        ConstantCost(STEP_S),
        make_policy(policy, max_queued=4, stall_timeout_s=0.25),
        # A connection holds about 11 token events, so slow readers back up.
        Overheads(delivery_s=0.005, disconnect_detect_s=DETECT_S, transport_bytes=1024),
    )
    trace = mix()
    return trace, replay(trace, setup, probe=watch.probe), watch


def peak_in_flight(outcomes) -> int:
    edges = sorted([(o.arrival_s, 1) for o in outcomes] + [(o.finish_s, -1) for o in outcomes])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("policy", sorted(BACKLOG_POLICIES))
def test_every_block_and_sequence_comes_back(policy):
    trace, result, watch = run(policy)
    core = watch.core
    s = core.snapshot()
    assert (s.running, s.waiting, s.paused, s.inbox) == (0, 0, 0, 0)
    assert (s.blocks_free, s.blocks_reserved, s.blocks_used) == (NUM_BLOCKS, 0, 0)
    assert core.pool.is_whole()

    # One reservation per admission, and as many releases: a second release of a
    # sequence would have raised, so each was released exactly once.
    admitted = sum(1 for o in result.outcomes if o.admitted_s is not None)
    assert (core.pool.reservations, core.pool.releases) == (admitted, admitted)
    # Leavers that go before their prompt is admitted are never admitted at all.
    assert admitted < len(trace)
    assert peak_in_flight(result.outcomes) >= 40

    outcomes = {o.id: o for o in result.outcomes}
    by_kind = Counter()
    for r in trace:
        o = outcomes[r.id]
        assert o.refused is None and o.finish_s is not None
        if not r.client.leaves:
            by_kind["read to the end"] += o.finish_reason == "length"
            assert o.tokens_read == r.max_new_tokens and o.left_s is None
        elif r.client.slow:
            by_kind["slow, left or dropped"] += o.left_s is not None or o.finish_reason == "slow_client"
        else:
            by_kind["left"] += o.left_s is not None and o.tokens_read == r.client.leave_after_tokens
    assert by_kind == {"read to the end": READERS, "left": LEAVERS, "slow, left or dropped": SLOW}

    assert (result.summary.dropped > 0) == (policy in ("drop", "pause_then_drop"))
    assert (watch.pauses > 0) == (policy in ("pause", "pause_then_drop"))


@pytest.mark.parametrize("policy", sorted(BACKLOG_POLICIES))
def test_tokens_after_leaving_stop_at_the_cancel(policy):
    """A cancel reaches the inbox DETECT_S after the client leaves and takes effect
    at the next plan: only steps that began by then can make tokens for it, one each."""
    _, result, _ = run(policy)
    token_steps = [row["time_s"] for row in result.series.rows() if row["tokens"]]
    for o in result.outcomes:
        if o.left_s is None:
            assert o.tokens_after_leave == 0, o.id
            continue
        cancel_at = o.left_s + DETECT_S
        bound = sum(1 for end in token_steps if o.left_s < end and end - STEP_S <= cancel_at + 1e-9)
        assert o.tokens_after_leave <= bound, o.id
    wasted = [o.tokens_after_leave for o in result.outcomes]
    assert sum(wasted) == result.summary.wasted_tokens
    assert sum(1 for n in wasted if n) >= 20  # the bound was put to the test
