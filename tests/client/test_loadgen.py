"""The load-generating client against a stand-in server on 127.0.0.1: a raw
asyncio server, in its own thread, that speaks the project's stream schema with
scripted streams and records what it saw of each connection: the request body,
how much it could write and how long its writes blocked, and how the client left
(EOF is a FIN; a reset is an RST)."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import pytest

from live.client.loadgen import add_parser, replay
from live.client.refusal import refusal_for
from live.client.request_body import PromptFiller, request_body
from traces.jsonl import write_trace
from traces.outcome import Refusal, RequestOutcome, read_outcomes
from traces.record import Client, LeaveHow, ReadMode, TraceRequest


@dataclass
class Script:
    """How the stand-in answers one request."""

    tokens: int = 5
    reason: str = "length"
    gap_s: float = 0.0
    """Between tokens, as a step would space them."""
    pad: int = 0
    """Extra characters in each token's text, to make events large."""
    refuse: tuple[int, str] | None = None
    refuse_chunked: bool = False
    error_after: int | None = None
    """An error event instead of this token; then a done "error", as the server does."""
    done_after_error: bool = True
    hang_up_after: int | None = None
    """Close the connection after this many tokens, mid-stream."""
    keepalive: bool = False
    """A comment before the start event and between tokens."""
    send_buffer: int | None = None
    """The stand-in's SO_SNDBUF for this stream."""


@dataclass
class Seen:
    """What the stand-in saw of one stream request."""

    body: dict
    request_id: str
    arrival_unix: float
    tokens_sent: int = 0
    bytes_sent: int = 0
    """Bytes the kernel took (the stand-in waits for each write to be taken)."""
    blocked_s: float = 0.0
    """Time its writes waited for the kernel to take them."""
    named: str | None = None
    """The X-Request-Id the client sent, if any."""
    done_sent: bool = False
    peer_close: str | None = None
    """"fin" (EOF read) or "rst" (connection reset), as first seen."""
    timing: dict = field(default_factory=dict)
    """The unix times the done event reports (arrival, admitted, first_token, finished)."""


def sse(event: str, rid: str, seq: int, data: dict) -> bytes:
    text = f"event: {event}\r\nid: {rid}:{seq}\r\ndata: {json.dumps(data)}\r\n\r\n".encode()
    return b"%x\r\n%s\r\n" % (len(text), text)


class StandIn:
    def __init__(self):
        self.script: Callable[[dict], Script] = lambda body: Script()
        self.seen: list[Seen] = []
        self.running = 0
        self.tokens_after_leave = 100  # not zero, so the replay must take a difference
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> str:
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop).result()
        self._server = server
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        async def close():
            self._server.close()
            await self._server.wait_closed()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def by_prompt(self, prompt: str) -> Seen:
        (seen,) = [s for s in self.seen if s.body.get("prompt") == prompt]
        return seen

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *header_lines = head.strip().split("\r\n")
            _, path, _ = request_line.split(" ")
            headers = {k.strip().lower(): v.strip()
                       for k, v in (line.split(":", 1) for line in header_lines)}
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            if path == "/stats":
                stats = {"running": self.running, "waiting": 0,
                         "tokens_after_leave": self.tokens_after_leave}
                await self._json(writer, 200, stats)
                return
            assert path == "/v1/stream" and headers["connection"] == "close"
            seen = Seen(json.loads(body), f"req{len(self.seen)}", time.time(),
                        named=headers.get("x-request-id"))
            self.seen.append(seen)
            script = self.script(seen.body)
            if script.refuse is not None:
                status, message = script.refuse
                await self._json(writer, status, {"error": {"type": "refused", "message": message}},
                                 chunked=script.refuse_chunked, extra="Retry-After: 1\r\n")
                return
            self.running += 1
            try:
                await self._stream(reader, writer, seen, script)
            finally:
                self.running -= 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _json(writer, status: int, obj: dict, *, chunked=False, extra="") -> None:
        body = json.dumps(obj).encode()
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}"
                     f"{framing}\r\nConnection: close\r\n\r\n".encode())
        if chunked:  # in two chunks, to exercise the decoder
            writer.write(b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:]))
        else:
            writer.write(body)
        await writer.drain()

    async def _stream(self, reader, writer, seen: Seen, script: Script) -> None:
        if script.send_buffer:
            writer.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, script.send_buffer)
        # Wait for the kernel to take every write: a write that cannot go out
        # blocks here, and the time it blocks is recorded.
        writer.transport.set_write_buffer_limits(high=0)
        watcher = asyncio.create_task(self._watch(reader, seen))

        async def send(data: bytes) -> None:
            writer.write(data)
            t = time.monotonic()
            try:
                await writer.drain()
            finally:  # a drain ended by the client's reset blocked too
                seen.blocked_s += time.monotonic() - t
            seen.bytes_sent += len(data)

        rid, seq = seen.request_id, 0
        prompt_tokens = len(seen.body.get("prompt_tokens", [])) or 3
        writer.write(("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      f"Cache-Control: no-cache\r\nX-Request-Id: {rid}\r\n"
                      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode())
        keepalive = b": keep-alive\r\n\r\n"
        keepalive = b"%x\r\n%s\r\n" % (len(keepalive), keepalive)
        timing = seen.timing
        timing.update(arrival=seen.arrival_unix, admitted=time.time())
        try:
            if script.keepalive:
                await send(keepalive)
            await send(sse("start", rid, seq, {"id": rid, "prompt_tokens": prompt_tokens}))
            for i in range(script.tokens):
                if script.gap_s:
                    await asyncio.sleep(script.gap_s)
                if seen.peer_close:
                    self.tokens_after_leave += 1  # the step in flight when the leave was seen
                    break
                if i == script.hang_up_after:
                    return
                if i == script.error_after:
                    seq += 1
                    await send(sse("error", rid, seq,
                                   {"error": {"type": "engine", "message": "scripted failure"}}))
                    if script.done_after_error:
                        await send(sse("done", rid, seq + 1, {
                            "finish_reason": "error",
                            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": i},
                            "timing": {**timing, "finished": time.time()}}))
                        seen.done_sent = True
                    break
                timing.setdefault("first_token", time.time())
                seq += 1
                await send(sse("token", rid, seq, {"index": i, "token_id": 7 + i,
                                                   "text": f"t{i}" + "x" * script.pad}))
                seen.tokens_sent += 1
                if script.keepalive:
                    await send(keepalive)
            else:
                timing["finished"] = time.time()
                await send(sse("done", rid, seq + 1, {
                    "finish_reason": script.reason,
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": script.tokens},
                    "timing": timing}))
                seen.done_sent = True
            await send(b"0\r\n\r\n")
        except ConnectionError:
            pass
        # A patient server: it lets the client close first, so the close it sees
        # is the client's.
        await asyncio.wait([watcher], timeout=2)

    @staticmethod
    async def _watch(reader: asyncio.StreamReader, seen: Seen) -> None:
        try:
            seen.peer_close = "fin" if not await reader.read(1) else "data"
        except ConnectionResetError:
            seen.peer_close = "rst"


@pytest.fixture
def stand_in():
    server = StandIn()
    url = server.start()
    server.url = url
    yield server
    server.stop()


def req(rid: str, arrival_s: float = 0.0, tokens: int = 5, prompt: str | None = None,
        **client) -> TraceRequest:
    return TraceRequest(rid, arrival_s, prompt_tokens=4, max_new_tokens=tokens,
                        prompt=prompt if prompt is not None else rid, client=Client(**client))


def test_records_match_what_the_server_sent(stand_in):
    scripts = {
        "plain": Script(tokens=5),
        "busy": Script(tokens=3, refuse=(429, "waiting queue full")),
        "overloaded": Script(refuse=(503, "shutting down"), refuse_chunked=True),
        "failing": Script(tokens=6, error_after=2),
        "cut": Script(tokens=6, error_after=3, done_after_error=False),
        "idle": Script(tokens=4, reason="stop", keepalive=True, gap_s=0.02),
        "slow": Script(tokens=10, gap_s=0.08),
    }
    stand_in.script = lambda body: scripts.get(body.get("prompt"), Script(tokens=7, reason="eos"))
    requests = [
        req("slow", 0.0, tokens=10),  # a long stream must not delay later arrivals
        req("plain", 0.1),
        TraceRequest("counted", 0.2, prompt_tokens=12, max_new_tokens=7),
        req("busy", 0.3),
        req("overloaded", 0.4),
        req("failing", 0.5, tokens=6),
        req("idle", 0.6, tokens=4),
        req("cut", 0.7, tokens=6),
    ]
    result = replay(stand_in.url, requests, time_scale=0.5)
    o = {x.id: x for x in result.outcomes}
    assert [x.id for x in result.outcomes] == [r.id for r in requests]

    # Sent in the schedule's order, each while the slow stream that began first was
    # still open: a long stream does not hold later arrivals back.
    assert [r.id for r in sorted(requests, key=lambda r: o[r.id].arrival_s)] == \
        [r.id for r in requests]
    for r in requests[1:]:
        assert o[r.id].arrival_s < o["slow"].finish_s, r.id
    assert result.max_lag_s == max(o[r.id].arrival_s - r.arrival_s * 0.5 for r in requests)

    plain = o["plain"]
    assert (plain.finish_reason, plain.tokens_read, plain.tokens_generated) == ("length", 5, 5)
    assert plain.prompt_tokens == 3  # from the start event, not the trace
    assert len(plain.token_times_s) == 5 and plain.token_times_s == sorted(plain.token_times_s)
    assert plain.first_token_client_s == plain.token_times_s[0]
    assert plain.arrival_s < plain.headers_s <= plain.first_token_client_s
    assert plain.left_s is None and plain.refused is None
    # The server's clock, moved to replay seconds; the end is when the client saw it.
    stamps = stand_in.by_prompt("plain").timing
    assert (plain.admitted_s, plain.first_token_engine_s) == pytest.approx(
        (stamps["admitted"] - result.started_unix, stamps["first_token"] - result.started_unix),
        abs=1e-6)
    assert plain.finish_s >= stamps["finished"] - result.started_unix - 0.01
    assert plain.arrival_s <= plain.admitted_s <= plain.first_token_engine_s <= plain.finish_s
    assert plain.first_token_engine_s <= plain.first_token_client_s + 0.01

    counted = o["counted"]
    ids = stand_in.seen[[s.body.get("prompt") for s in stand_in.seen].index(None)].body
    assert ids["prompt_tokens"] == PromptFiller()(requests[2])
    assert len(ids["prompt_tokens"]) == 12 and all(1000 <= t < 2000 for t in ids["prompt_tokens"])
    assert ids["ignore_eos"] is True and ids["max_new_tokens"] == 7
    assert (counted.finish_reason, counted.tokens_read, counted.prompt_tokens) == ("eos", 7, 12)

    # The refusal in the simulator's vocabulary; the server's message beside it.
    assert (o["busy"].refused, o["overloaded"].refused) == ("queue_full", "unavailable")
    assert result.problems["busy"] == "429 waiting queue full"
    assert result.problems["overloaded"] == "503 shutting down"
    for rid in ("busy", "overloaded"):
        assert (o[rid].tokens_read, o[rid].finish_reason, o[rid].left_s) == (0, None, None)
        assert o[rid].arrival_s < o[rid].headers_s  # a refusal has headers too

    failing, cut = o["failing"], o["cut"]
    assert (failing.finish_reason, failing.tokens_read, failing.tokens_generated) == ("error", 2, 2)
    assert failing.finish_s is not None and failing.left_s is None
    assert (cut.finish_reason, cut.tokens_read, cut.tokens_generated) == ("error", 3, 3)
    assert "scripted failure" in result.problems["failing"]
    assert "scripted failure" in result.problems["cut"]

    idle = o["idle"]
    assert (idle.finish_reason, idle.tokens_read) == ("stop", 4)

    slow = o["slow"]
    assert (slow.finish_reason, slow.tokens_read) == ("length", 10)

    # Every stream that finished was closed by the client with a FIN, after it
    # had read the whole body.
    for s in stand_in.seen:
        if s.done_sent:
            assert s.peer_close == "fin", s.body.get("prompt")
    assert result.wasted_tokens_total == 0


@pytest.mark.parametrize("how", [LeaveHow.FIN, LeaveHow.RST])
def test_leave_after_tokens(stand_in, how):
    stand_in.script = lambda body: Script(tokens=50, gap_s=0.01)
    requests = [req("leaver", leave_after_tokens=3, leave_how=how),
                req("stayer", tokens=50)]
    result = replay(stand_in.url, requests)
    leaver, stayer = result.outcomes
    assert (leaver.tokens_read, leaver.tokens_generated, leaver.finish_reason) == (3, 3, None)
    assert leaver.left_s is not None and leaver.left_s >= leaver.token_times_s[-1]
    assert (stayer.tokens_read, stayer.finish_reason) == (50, "length")
    seen = stand_in.by_prompt("leaver")
    assert seen.peer_close == how.value
    assert not seen.done_sent and seen.tokens_sent < 50
    assert result.wasted_tokens_total == 1  # the stand-in's one step after the leave


def test_each_request_is_told_done_as_it_ends(stand_in):
    stand_in.script = lambda body: Script(tokens=20, gap_s=0.02)
    requests = [req("short", tokens=2), req("leaver", leave_after_tokens=1),
                req("long", tokens=20)]
    told = []
    result = replay(stand_in.url, requests, on_done=lambda: told.append(time.monotonic()))
    assert len(told) == len(requests)
    # the 2-token stream is told of as it ends, well before the 20-token one
    assert told[-1] - told[0] > 0.2


@pytest.mark.parametrize("warn_lag_s", [0.15, None])
def test_requests_sent_late_are_reported_unless_asked_not_to(stand_in, caplog, warn_lag_s):
    # One connection at a time: the second waits for the first's 10 tokens, 0.27 s
    # at least, far past the threshold, which the first is sent well within.
    stand_in.script = lambda body: Script(tokens=10, gap_s=0.03)
    requests = [req("first", tokens=10), req("second", tokens=10)]
    with caplog.at_level("WARNING", logger="live.client.loadgen"):
        result = replay(stand_in.url, requests, max_connections=1, warn_lag_s=warn_lag_s)
    assert result.max_lag_s > 0.27
    late = [r for r in caplog.records if "after their arrival" in r.getMessage()]
    if warn_lag_s is None:
        assert late == []
    else:
        assert [r.getMessage().split(" were")[0] for r in late] == ["1 of 2 requests"]


def test_a_session_sends_each_request_its_think_time_after_the_one_before(stand_in):
    stand_in.script = lambda body: Script(tokens=5, gap_s=0.02)
    turns = [dataclasses.replace(req(f"turn{i}", leave_after_tokens=2 if i == 1 else None),
                                 session="user", think_s=0.0 if i == 0 else 0.2)
             for i in range(3)]
    requests = turns + [req("open", arrival_s=0.05)]
    result = replay(stand_in.url, requests)
    first, second, third, open_loop = result.outcomes
    assert second.arrival_s >= first.finish_s + 0.2
    assert second.left_s is not None  # it gave up after 2 tokens: the next turn follows that
    assert second.left_s + 0.2 <= third.arrival_s < second.left_s + 0.2 + 0.1
    assert 0.05 <= open_loop.arrival_s < first.finish_s  # not held by the session
    assert [o.tokens_read for o in result.outcomes] == [5, 2, 5, 5]


def test_leave_at_once_and_after_seconds(stand_in):
    stand_in.script = lambda body: Script(tokens=100, gap_s=0.02)
    requests = [req("at-once", leave_after_tokens=0),
                req("timed", leave_after_s=0.3, leave_how=LeaveHow.RST)]
    at_once, timed = replay(stand_in.url, requests).outcomes
    assert at_once.tokens_read == 0 and at_once.left_s is not None
    assert at_once.arrival_s < at_once.headers_s <= at_once.left_s
    # Left on its timer, not at the stream's end: 100 tokens 20 ms apart last 2 s.
    assert timed.left_s - timed.arrival_s >= 0.3
    assert 3 <= timed.tokens_read < 100 and timed.finish_reason is None
    assert max(timed.token_times_s) <= timed.left_s
    assert stand_in.by_prompt("at-once").peer_close == "fin"
    assert stand_in.by_prompt("timed").peer_close == "rst"


def test_per_event_reader_pauses_after_each_token(stand_in):
    # The stand-in sends every token at once; the gaps the client records are its own.
    stand_in.script = lambda body: Script(tokens=8)
    pause = 0.05
    slow, fast = replay(stand_in.url, [req("slow", tokens=8, read=ReadMode.PER_EVENT,
                                           pause_s=pause),
                                       req("fast", tokens=8)]).outcomes
    assert slow.tokens_read == fast.tokens_read == 8
    assert slow.finish_reason == fast.finish_reason == "length"
    assert all(gap >= pause - 0.005 for gap in slow.gaps_s)
    assert len(slow.gaps_s) == 7
    assert sum(fast.gaps_s) < sum(slow.gaps_s)  # the instant reader does not wait


def test_byte_rate_reader_holds_the_server_back(stand_in):
    # Large events and small socket buffers: the backlog reaches the server fast.
    stand_in.script = lambda body: Script(tokens=400, pad=2000, send_buffer=8192)
    rate = 40_000
    slow, fast = replay(stand_in.url, [
        req("slow", tokens=400, read=ReadMode.BYTE_RATE, bytes_per_s=rate,
            leave_after_s=1.0, leave_how=LeaveHow.RST),
        req("fast", tokens=400)], recv_buffer_bytes=8192).outcomes
    slow_seen, fast_seen = stand_in.by_prompt("slow"), stand_in.by_prompt("fast")
    event_bytes = len(sse("token", "req0", 1, {"index": 0, "token_id": 7, "text": "t0" + "x" * 2000}))
    total = 400 * event_bytes

    assert fast.tokens_read == 400 and fast_seen.bytes_sent > total

    # The slow client took no more than its rate allows ...
    assert 5 <= slow.tokens_read and slow.tokens_read * event_bytes <= 1.5 * rate * 1.0 + 4096
    # ... and the stand-in could hand the kernel only a fraction of the stream: its
    # writes blocked for most of the second the client stayed.
    assert slow_seen.bytes_sent < total / 3
    assert slow_seen.blocked_s > 0.5
    assert slow_seen.peer_close == "rst"


def test_broken_and_silent_streams_are_errors(stand_in):
    scripts = {"hang-up": Script(tokens=5, hang_up_after=2), "silent": Script(tokens=3, gap_s=1.0)}
    stand_in.script = lambda body: scripts[body["prompt"]]
    result = replay(stand_in.url, [req("hang-up"), req("silent")], timeout_s=0.3)
    hang_up, silent = result.outcomes
    assert (hang_up.finish_reason, hang_up.tokens_read, hang_up.left_s) == ("error", 2, None)
    assert "without a done" in result.problems["hang-up"]
    assert (silent.finish_reason, silent.tokens_read) == ("error", 0)
    assert "nothing received" in result.problems["silent"]


def test_connection_refused_is_recorded():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    result = replay(f"http://127.0.0.1:{port}", [req("nobody")], settle_s=0.0)
    (o,) = result.outcomes
    assert o.refused == "unreachable" and result.problems["nobody"].startswith("connection failed")
    assert o.headers_s is None
    assert result.stats_before is None and result.wasted_tokens_total is None


@pytest.mark.parametrize("status, refusal", [
    (429, Refusal.QUEUE_FULL), (422, Refusal.TOO_LARGE), (400, Refusal.INVALID),
    (401, Refusal.INVALID), (404, Refusal.INVALID), (409, Refusal.INVALID), (413, Refusal.INVALID),
    (503, Refusal.UNAVAILABLE), (500, Refusal.SERVER_ERROR), (502, Refusal.SERVER_ERROR),
])
def test_a_refusal_is_named_by_its_status(status, refusal):
    assert refusal_for(status) is refusal


def test_request_body_from_a_trace_record():
    r = TraceRequest("r", 0.0, prompt_tokens=3, max_new_tokens=9, temperature=0.7, top_p=0.9,
                     top_k=40, seed=5, ignore_eos=False)
    body = request_body(r, PromptFiller(low=10, high=12))
    assert body == {"max_new_tokens": 9, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
                    "ignore_eos": False, "seed": 5, "prompt_tokens": body["prompt_tokens"]}
    assert sorted(set(body["prompt_tokens"])) == [10, 11] and len(body["prompt_tokens"]) == 3
    assert request_body(r, PromptFiller(low=10, high=12)) == body  # deterministic


def test_command_line(stand_in, tmp_path, capsys):
    trace, out = tmp_path / "trace.jsonl", tmp_path / "outcomes.parquet"
    write_trace(trace, [req("a", 0.0, tokens=5), req("b", 0.05, tokens=5, leave_after_tokens=2)])
    stand_in.script = lambda body: Script(tokens=5, gap_s=0.01)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", "--url", stand_in.url, "--trace", str(trace),
                              "--time-scale", "2", "--out", str(out), "--request-id-prefix", "p-"])
    assert args.func(args) == 0
    assert sorted(s.named for s in stand_in.seen) == ["p-a", "p-b"]
    outcomes = {o.id: o for o in read_outcomes(out)}
    assert outcomes["a"].tokens_read == 5 and outcomes["b"].tokens_read == 2
    assert outcomes["b"].arrival_s >= 0.09  # 0.05 s scaled by 2
    printed = capsys.readouterr().out
    assert "requests 2, refused 0, left 1" in printed
    assert "finished: length 1" in printed and "wasted tokens" in printed
    assert "each stream's longest p50" in printed


def test_outcomes_written_before_headers_s_was_recorded_still_read(tmp_path):
    path = tmp_path / "outcomes.jsonl"  # as runs wrote them before Parquet
    now = RequestOutcome("new", 0.5, 4, 8, headers_s=0.51, first_token_client_s=0.6,
                         token_times_s=[0.6], tokens_read=1)
    older = {"id": "old", "arrival_s": 0.0, "prompt_tokens": 4, "max_new_tokens": 8,
             "token_times_s": [0.2, 0.3], "finish_reason": "length", "tokens_read": 2}
    with open(path, "w") as f:
        for line in ({name: getattr(now, name) for name in now.__slots__}, older):
            f.write(json.dumps(line) + "\n")
    new, old = read_outcomes(path)
    assert new == now
    assert old.headers_s is None and old.token_times_s == [0.2, 0.3]
    assert (old.finish_reason, old.tokens_read) == ("length", 2)
