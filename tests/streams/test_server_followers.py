"""Readers that follow a stream by `GET /v1/stream/{id}` besides its owner (the POST
that opened it, or the GET that resumed it after the owner left): at most
`max_readers_per_stream` of them, more answered 429 at no other cost; and the
backlog policy judges the stream by its owner alone: a follower that falls behind
is cut (its own connection reset) and never pauses or drops the owner's stream."""
import json

import httpx
import pytest

from scheduler.settings import ServeSettings
from live_server import (PacedRunner, RawStream, held_app, running_server, stats, tiny_app,
                         wait_for, wait_idle)

PADDING = 256 * 1024
"""Loopback buffers take a few MB: with this, a stalled socket is full after ~12 events."""
SLOW_RCVBUF = 4096


def _owner(url: str, stream_id: str, n: int) -> RawStream:
    owner = RawStream(url, "/v1/stream", {"prompt": f"{stream_id} prompt", "max_new_tokens": n},
                      headers={"X-Request-Id": stream_id})
    assert owner.read_head() == 200
    return owner


def _follow(url: str, stream_id: str, **options) -> RawStream:
    follower = RawStream(url, f"/v1/stream/{stream_id}", method="GET", **options)
    assert follower.read_head() == 200
    return follower


def _data(events):
    return [json.loads(e.data) for e in events]


def test_a_follower_beyond_the_limit_is_refused_and_costs_nothing():
    app, engine, runner = held_app(ServeSettings(max_readers_per_stream=2))
    with running_server(app) as url:
        runner.hold()
        owner = _owner(url, "followed", 10)
        owner.read_events(1)
        followers = [_follow(url, "followed") for _ in range(2)]
        before = stats(url)
        assert before["readers"] == 3
        refused = httpx.get(f"{url}/v1/stream/followed", timeout=10)
        assert refused.status_code == 429
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"]["type"] == "queue_full"
        assert "followed" in refused.json()["error"]["message"]
        assert stats(url)["readers"] == 3
        # a follower that leaves frees its place
        followers.pop().close()
        wait_for(lambda: stats(url)["readers"] == 2, what="the follower to leave")
        followers.append(_follow(url, "followed"))
        runner.release()
        answers = [r.read_to_end() for r in [owner, *followers]]
        for reader in [owner, *followers]:
            reader.close()
        after = wait_idle(url)
    for events in answers:
        assert [e.event for e in events] == ["start"] + ["token"] * 10 + ["done"]
        assert _data(events)[-1]["finish_reason"] == "length"
    assert after["finished"] == {"length": 1} and after["readers"] == 0
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


@pytest.mark.parametrize("policy", ["pause", "drop", "pause_then_drop"])
def test_a_stalled_follower_is_cut_alone_and_never_holds_the_owner_back(policy):
    app, engine = tiny_app(ServeSettings(policy=policy, max_queued=4, stall_timeout_s=0.5,
                                         event_padding=PADDING),
                           runner_wrapper=lambda runner: PacedRunner(runner, 0.01))
    with running_server(app) as url:
        owner = _owner(url, "owned", 150)
        owner.read_events(1)
        follower = _follow(url, "owned", recv_buffer=SLOW_RCVBUF)
        events = owner.read_to_end()
        owner.close()
        cut = wait_for(lambda: (s := stats(url))["readers_cut"] == 1 and s["readers"] == 0 and s,
                       what="the follower's cut")
        with pytest.raises(ConnectionResetError):
            follower.read_to_end()
        follower.close()
        after = wait_idle(url)
    data = _data(events)
    assert [e.event for e in events] == ["start"] + ["token"] * 150 + ["done"]
    assert data[-1]["finish_reason"] == "length"
    assert cut["aborts"]["slow_client"] == 0
    assert after["finished"] == {"length": 1} and after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


def test_a_get_that_resumes_a_stream_its_owner_left_is_its_owner():
    # judged as the owner, a resumed reader that stalls has the stream dropped
    app, engine = tiny_app(ServeSettings(policy="drop", stall_timeout_s=0.5, resume_grace_s=30,
                                         event_padding=PADDING),
                           runner_wrapper=lambda runner: PacedRunner(runner, 0.01))
    with running_server(app) as url:
        owner = _owner(url, "resumed", 200)
        seen = owner.read_events(3)
        owner.reset()
        wait_for(lambda: stats(url)["streams_in_grace"] == 1, what="the owner to leave")
        resumed = _follow(url, "resumed", recv_buffer=SLOW_RCVBUF,
                          headers={"Last-Event-ID": seen[-1].id})
        wait_for(lambda: stats(url)["aborts"]["slow_client"] == 1, what="the drop")
        wait_for(lambda: stats(url)["readers"] == 0, what="the resumed reader's end")
        resumed.close()
        after = wait_idle(url)
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()
