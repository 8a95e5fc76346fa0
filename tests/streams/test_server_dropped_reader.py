"""A dropped stream's reader that still reads: `drop` frees the engine (slot and
blocks) once the reader's backlog stalls, but the reader is not cut while it makes
progress. It takes every token queued before the drop, then the `slow_client`
error, in each wire format. Progress is bytes leaving the server: with padded
events and MBs of loopback buffers, one write waits longer than the stall timeout
for a reader that reads all along. A reader that then stops reading entirely is
cut after the stall timeout."""
import json

import httpx
import pytest

from live_server import (TOY_NAME, PacedRunner, RawStream, running_server, stats, tiny_app,
                         wait_for, wait_idle)
from scheduler.settings import ServeSettings

PADDING = 256 * 1024
"""Loopback buffers take a few MB: with this, a stalled socket is full after ~12 events."""
SLOW_RCVBUF = 4096
STALL_S = 0.5
MAX_TOKENS = 200
STEP_S = 0.1
"""Slow steps: the stream would run 20 s, and few tokens queue up before the drop."""


def _tokens_stream(events) -> int:
    """The tokens read, checking that the stream ends with `slow_client`."""
    data = [json.loads(e.data) for e in events]
    assert events[-1].event == "done" and data[-1]["finish_reason"] == "slow_client"
    indices = [d["index"] for e, d in zip(events, data) if e.event == "token"]
    assert indices == list(range(len(indices)))
    assert data[-1]["usage"]["completion_tokens"] == len(indices)
    return len(indices)


def _tokens_chat(events) -> int:
    assert events[-1].data == "[DONE]"
    error = json.loads(events[-2].data)["error"]
    assert error["code"] == "unavailable" and "too slowly" in error["message"]
    chunks = [json.loads(e.data) for e in events[:-2]]
    return sum(1 for c in chunks if "role" not in c["choices"][0]["delta"])


def _tokens_messages(events) -> int:
    assert events[-1].event == "error"
    error = json.loads(events[-1].data)["error"]
    assert error["type"] == "overloaded_error" and "too slowly" in error["message"]
    return sum(1 for e in events if e.event == "content_block_delta")


FORMATS = {
    "stream": ("/v1/stream", {"prompt": "reads on", "max_new_tokens": MAX_TOKENS},
               _tokens_stream),
    "chat": ("/v1/chat/completions",
             {"model": TOY_NAME, "max_tokens": MAX_TOKENS, "stream": True,
              "messages": [{"role": "user", "content": "reads on"}]}, _tokens_chat),
    "messages": ("/v1/messages",
                 {"model": TOY_NAME, "max_tokens": MAX_TOKENS, "stream": True,
                  "messages": [{"role": "user", "content": "reads on"}]}, _tokens_messages),
}


def _app():
    settings = ServeSettings(policy="drop", stall_timeout_s=STALL_S, event_padding=PADDING)
    return tiny_app(settings, runner_wrapper=lambda runner: PacedRunner(runner, STEP_S))


def _dropped(url: str, path: str, body: dict) -> RawStream:
    """A stream whose reader reads nothing until the drop has freed the engine."""
    reader = RawStream(url, path, body, recv_buffer=SLOW_RCVBUF)
    assert reader.read_head() == 200
    freed = wait_for(lambda: (s := stats(url))["aborts"]["slow_client"] == 1
                     and s["blocks_reserved"] == 0 and s, what="the drop")
    assert freed["running"] == 0 and freed["readers"] == 1
    return reader


@pytest.mark.parametrize("api", list(FORMATS))
def test_a_dropped_reader_that_still_reads_gets_every_queued_token_then_slow_client(api):
    path, body, tokens_of = FORMATS[api]
    app, engine = _app()
    with running_server(app) as url:
        reader = _dropped(url, path, body)
        # 4 KiB every 5 ms: a few stall timeouts to drain MBs, each write waiting
        # longer than one for the kernel to take it, but bytes moving all along
        events = reader.read_slowly(chunk=SLOW_RCVBUF, pause_s=0.005)
        reader.close()
        after = wait_idle(url)
        (record,) = [json.loads(line) for line in httpx.get(f"{url}/v1/requests").text.splitlines()]
    read = tokens_of(events)
    assert after["readers_cut"] == 0 and after["readers"] == 0
    # every token queued before the drop; the engine made the others after it, for
    # a stream that had ended (its finish event is dropped too)
    assert 0 < read < MAX_TOKENS and record["finish_reason"] == "slow_client"
    assert read + after["dropped_events"] - 1 == record["completion_tokens"]
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


def test_a_dropped_reader_that_stops_reading_is_cut():
    app, engine = _app()
    with running_server(app) as url:
        reader = _dropped(url, "/v1/stream", FORMATS["stream"][1])
        reader.read_events(3)  # some progress after the drop, then none
        wait_for(lambda: stats(url)["readers_cut"] == 1, what="the cut")
        with pytest.raises(ConnectionError):
            reader.read_to_end()
        assert not any(e.event == "done" for e in reader.events)
        reader.close()
        after = wait_idle(url)
    assert after["readers"] == 0 and after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()
