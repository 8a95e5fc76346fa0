"""The write-stall timeout: a reader that takes nothing for `stall_timeout_s` after
its stream ended (done, or dropped as `slow_client`) is cut, and its connection
aborted (RST, whatever was buffered discarded) rather than closed gracefully, which
would wait for ever to flush to a zero window. A reader that reads slowly but
steadily is never cut. Over HTTP/2 the cut resets that one stream, and the
connection goes on. Readers stall for real: a small receive buffer (or no HTTP/2
credit), and events padded so that the buffers fill after a few."""
import json

import pytest

from h2_client import H2Client
from scheduler.settings import ServeSettings
from live_server import (PacedRunner, RawStream, running_server, stats, tiny_app, wait_for,
                         wait_idle)

PADDING = 256 * 1024
"""Loopback buffers take a few MB: with this, a stalled socket is full after ~12 events."""
SLOW_RCVBUF = 4096


def _stalled(url: str, prompt: str, n: int, recv_buffer: int = SLOW_RCVBUF) -> RawStream:
    """A stream whose client reads the head and then nothing (until told)."""
    client = RawStream(url, "/v1/stream", {"prompt": prompt, "max_new_tokens": n},
                       recv_buffer=recv_buffer)
    assert client.read_head() == 200
    return client


def _assert_cut(url: str, client: RawStream) -> None:
    """The server has let go of the reader and reset its connection."""
    after = wait_for(lambda: (s := stats(url))["readers_cut"] == 1 and s["readers"] == 0 and s,
                     what="the cut")
    assert after["streams_open"] == 0
    with pytest.raises(ConnectionResetError):
        client.read_to_end()
    assert not any(e.event == "done" for e in client.events)
    client.close()


@pytest.mark.parametrize("policy", ["drop", "pause_then_drop"])
def test_a_stream_that_ends_while_its_reader_stalls_is_cut(policy):
    # 22 padded events fill the stalled socket; the stream is done long before the
    # stall timeout, so only the write-stall timeout can let go of its reader
    app, engine = tiny_app(ServeSettings(policy=policy, stall_timeout_s=1.0,
                                         event_padding=PADDING))
    with running_server(app) as url:
        client = _stalled(url, "ends unread", 20)
        done = wait_for(lambda: (s := stats(url))["finished"] == {"length": 1} and s,
                        what="the stream to end")
        assert done["readers"] == 1 and done["aborts"]["slow_client"] == 0
        _assert_cut(url, client)
        after = wait_idle(url)
    assert after["finished"] == {"length": 1} and after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


def test_a_dropped_stream_whose_reader_stays_stalled_is_cut_and_reset():
    app, engine = tiny_app(ServeSettings(policy="drop", stall_timeout_s=0.3,
                                         event_padding=PADDING),
                           runner_wrapper=lambda runner: PacedRunner(runner, 0.01))
    with running_server(app) as url:
        client = _stalled(url, "dropped unread", 200)
        wait_for(lambda: stats(url)["aborts"]["slow_client"] == 1, what="the drop")
        _assert_cut(url, client)
        after = wait_idle(url)
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


def test_a_reader_that_reads_slowly_but_steadily_is_not_cut():
    # The stream ends at once; its reader then takes a few stall timeouts to read
    # it all, but never one without progress. The server sees that progress only
    # each time the kernel's send buffer (MBs on loopback) drains by half: ten
    # times in 20 MB, each well within the timeout at this pace.
    app, engine = tiny_app(ServeSettings(policy="drop", stall_timeout_s=1.0,
                                         event_padding=PADDING))
    with running_server(app) as url:
        client = _stalled(url, "read slowly", 80, recv_buffer=128 * 1024)
        wait_for(lambda: stats(url)["finished"] == {"length": 1}, what="the stream to end")
        events = client.read_slowly(chunk=128 * 1024, pause_s=0.02)
        client.close()
        after = wait_idle(url)
    data = [json.loads(e.data) for e in events]
    assert [e.event for e in events] == ["start"] + ["token"] * 80 + ["done"]
    assert data[-1]["finish_reason"] == "length"
    assert after["readers_cut"] == 0 and after["readers"] == 0
    assert engine.core.is_drained()


def test_over_http2_a_cut_resets_its_stream_and_the_connection_goes_on():
    app, engine = tiny_app(ServeSettings(http2=True, policy="drop", stall_timeout_s=1.0,
                                         event_padding=PADDING))
    with running_server(app) as url:
        client = H2Client(url)
        stalled = client.post("/v1/stream", {"prompt": "no credit", "max_new_tokens": 20},
                              stall=True)
        sibling = client.post("/v1/stream", {"prompt": "reads", "max_new_tokens": 20})
        client.read_to_end(sibling)
        client.read_to_end(stalled)
        after_cut = stats(url)
        # the same connection still serves a new stream
        again = client.post("/v1/stream", {"prompt": "after the cut", "max_new_tokens": 5})
        client.read_to_end(again)
        client.drop()
        after = wait_idle(url)
    assert client.reset_by_server == {stalled}
    assert "done" not in client.event_names(stalled)
    assert client.event_names(sibling) == ["start"] + ["token"] * 20 + ["done"]
    assert client.event_names(again) == ["start"] + ["token"] * 5 + ["done"]
    assert after_cut["readers_cut"] == 1 and after_cut["finished"] == {"length": 2}
    assert after["finished"] == {"length": 3} and after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()
