"""Backlog policies over real sockets: a reader that stops reading (small receive
buffer, events padded so the socket fills after a few) under each policy. Only
`naive` lets it hold the others up; `pause` leaves it out of the batch and puts it
back when it reads; `drop` and `pause_then_drop` end it with `slow_client` and free
its blocks while it still is not reading."""
import json
import time

import pytest

from scheduler.settings import ServeSettings
from live_server import (PacedRunner, RawStream, ToyTokenizer, engine_alone, running_server,
                         stats, steady, tiny_app, wait_for, wait_idle)

PADDING = 256 * 1024
"""Loopback buffers take a few MB: with this, a stalled socket is full after ~12 events."""
SLOW_RCVBUF = 4096
TOK = ToyTokenizer()


def _settings(policy: str, **kw) -> ServeSettings:
    return ServeSettings(policy=policy, event_padding=PADDING, **kw)


def _slow(url: str, prompt: str, n: int) -> RawStream:
    slow = RawStream(url, "/v1/stream", {"prompt": prompt, "max_new_tokens": n},
                     recv_buffer=SLOW_RCVBUF)
    assert slow.read_head() == 200
    return slow


def _data(events):
    return [json.loads(e.data) for e in events]


@pytest.mark.parametrize("policy", ["naive", "unbounded", "pause", "drop", "pause_then_drop"])
def test_only_naive_lets_a_slow_reader_hold_up_the_others(policy):
    app, engine = tiny_app(_settings(policy, max_queued=4, stall_timeout_s=60))
    with running_server(app) as url:
        slow = _slow(url, "slow reader", 60)
        if policy == "naive":
            blocked = steady(url, lambda s: s["engine_waiting_for_readers"])
        else:
            # past where pause would put it back (2, half of max_queued): under pause
            # a full socket can leave it resting at 3 or 4, paused, whatever it held
            wait_for(lambda: stats(url)["queued_events"] > 2, what="the slow reader's backlog")
        fast = [RawStream(url, "/v1/stream", {"prompt": f"fast {i}", "max_new_tokens": 8})
                for i in range(3)]
        if policy == "naive":
            for f in fast:
                f.read_events(1)  # the start event is written at once...
            # ...but no step runs while the slow reader's event waits to be written
            assert steady(url, lambda s: s["engine_waiting_for_readers"])["step"] == blocked["step"]
            released = time.time()
            slow.read_to_end()
            dones = [_data(f.read_to_end())[-1] for f in fast]
            assert all(d["timing"]["first_token"] > released for d in dones)
        else:
            dones = [_data(f.read_to_end())[-1] for f in fast]
            released = time.time()
            assert all(d["timing"]["finished"] < released for d in dones)
            slow.read_to_end()
        assert [d["finish_reason"] for d in dones] == ["length"] * 3
        for f in fast:
            f.close()
        slow.close()
        wait_idle(url)
    assert engine.core.is_drained()


def test_pause_leaves_a_slow_reader_out_of_the_batch_and_resumes_it():
    app, engine = tiny_app(_settings("pause", max_queued=4))
    tokens, _, _ = engine_alone(TOK.encode("paused reader"), 40)
    with running_server(app) as url:
        slow = _slow(url, "paused reader", 40)
        paused = wait_for(lambda: (s := stats(url))["paused"] == 1 and s, what="the pause")
        assert paused["blocks_reserved"] > 0
        # the others proceed while it is paused
        other = RawStream(url, "/v1/stream", {"prompt": "another", "max_new_tokens": 6})
        assert _data(other.read_to_end())[-1]["finish_reason"] == "length"
        other.close()
        assert stats(url)["paused"] == 1
        # reading drains the backlog; the policy resumes it and it finishes whole
        events = slow.read_to_end()
        slow.close()
        data = _data(events)
        assert data[-1]["finish_reason"] == "length"
        assert [d["token_id"] for e, d in zip(events, data) if e.event == "token"] == tokens
        after = wait_idle(url)
        assert after["finished"] == {"length": 2} and after["paused"] == 0
    assert engine.core.is_drained()


def _paced(step_s: float):
    """Steps slow enough that a 200-token stream outlasts the stall timeouts here."""
    return lambda runner: PacedRunner(runner, step_s)


@pytest.mark.parametrize("policy", ["drop", "pause_then_drop"])
def test_drop_frees_a_stalled_stream_and_tells_it_slow_client(policy):
    app, engine = tiny_app(_settings(policy, max_queued=4, stall_timeout_s=1.0),
                           runner_wrapper=_paced(0.02))
    with running_server(app) as url:
        slow = _slow(url, "stalls", 200)
        if policy == "pause_then_drop":
            wait_for(lambda: stats(url)["paused"] == 1, what="the pause before the drop")
        # its slot and blocks come back while it still reads nothing
        after = wait_for(lambda: (s := stats(url))["aborts"]["slow_client"] == 1
                         and s["blocks_reserved"] == 0 and s, what="the drop")
        assert after["running"] == 0 and after["paused"] == 0
        events = slow.read_to_end()
        slow.close()
        data = _data(events)
        assert events[-1].event == "done" and data[-1]["finish_reason"] == "slow_client"
        made = sum(1 for e in events if e.event == "token")
        assert 0 < made < 200 and data[-1]["usage"]["completion_tokens"] == made
    assert engine.core.is_drained()


def test_a_dropped_reader_that_never_reads_is_cut_off():
    app, engine = tiny_app(_settings("drop", stall_timeout_s=0.3), runner_wrapper=_paced(0.01))
    with running_server(app) as url:
        slow = _slow(url, "never reads", 200)
        wait_for(lambda: stats(url)["aborts"]["slow_client"] == 1, what="the drop")
        # another stall timeout without a read after the drop, and the hub lets go
        wait_for(lambda: stats(url)["readers_cut"] == 1, what="the cut")
        with pytest.raises(ConnectionError):
            slow.read_to_end()
        assert not any(e.event == "done" for e in slow.events)
        slow.close()
        wait_idle(url)
    assert engine.core.is_drained()
