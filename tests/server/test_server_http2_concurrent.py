"""The studies' timed client (`over_one_client`) opening six streams at the same
instant on one HTTP/2 connection: every stream carries the engine's own tokens to
its `done`, round after round. Shared by threads, httpcore's sync HTTP/2
connection sent HEADERS out of stream-id order (or twice on one id, or
HPACK-encoded out of turn), which the server rightly answered with a GOAWAY
(PROTOCOL_ERROR, COMPRESSION_ERROR) for the whole connection. The interpreter
switches threads every 10 us here, so that such a race shows within a few rounds
rather than once in a long run."""
import json
import sys

import pytest

from analysis.study import timed_client
from live.client.sse_parser import SSEEvent, SSEParser
from live_server import ServerThread, ToyTokenizer, engine_alone, tiny_app, wait_idle
from scheduler.settings import ServeSettings
from traces import TraceRequest

TOK = ToyTokenizer()
ROUNDS = 8
TRACE = [TraceRequest("long", 0.0, 0, 24, prompt="the long one over h2")] + [
    TraceRequest(f"short-{i}", 0.0, 0, 4, prompt=f"short {i} beside it") for i in range(5)]


class RecordingParser(SSEParser):
    """The client's parser, keeping every event it parsed (in `received`)."""

    received: list[list[SSEEvent]] = []

    def __init__(self):
        super().__init__()
        self.events: list[SSEEvent] = []
        RecordingParser.received.append(self.events)

    def feed(self, chunk: bytes):
        items = super().feed(chunk)
        self.events += [e for e in items if isinstance(e, SSEEvent)]
        return items


@pytest.fixture
def eager_thread_switches():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def test_six_streams_opened_at_once_on_one_http2_connection_all_arrive_whole(
        monkeypatch, eager_thread_switches):
    monkeypatch.setattr(timed_client, "SSEParser", RecordingParser)
    monkeypatch.setattr(RecordingParser, "received", [])
    app, engine = tiny_app(ServeSettings(http2=True), num_blocks=256, max_batch=8)
    with ServerThread(app) as running:
        timings = [timed_client.over_one_client(running.base_url, TRACE, connections=1,
                                                http2=True)
                   for _ in range(ROUNDS)]
        after = wait_idle(running.base_url)
    expected = [["start"] + ["token"] * r.max_new_tokens + ["done"] for r in TRACE] * ROUNDS
    streams = RecordingParser.received
    assert sorted([e.event for e in events] for events in streams) == sorted(expected)
    references = sorted(engine_alone(TOK.encode(r.prompt), r.max_new_tokens)[0] for r in TRACE)
    for n in range(ROUNDS):
        round_streams = streams[n * len(TRACE):(n + 1) * len(TRACE)]
        assert sorted([json.loads(e.data)["token_id"] for e in events if e.event == "token"]
                      for events in round_streams) == references
        assert all(json.loads(events[-1].data)["finish_reason"] == "length"
                   for events in round_streams)
    assert all(t.keys() == {r.id for r in TRACE} and t["long"].first_token_s is not None
               for t in timings)
    assert after["finished"] == {"length": ROUNDS * len(TRACE)}
    assert engine.core.is_drained()
