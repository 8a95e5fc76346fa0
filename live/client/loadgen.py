"""The load-generating client: replays a trace against a live server, each request
sent at its arrival time and read the way its client reads, and records what
happened to it in the schema the simulator writes (`RequestOutcome`).

Each request is one HTTP/1.1 connection of `raw_http`, read only as fast as its
client reads, and left exactly as the trace says (FIN or RST).

Times in the records are seconds from the replay's start. The server's own times
(`done.timing`, unix seconds on the same host) are converted with the wall clock
read at that start.
"""
from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import httpx

from traces.outcome import RequestOutcome
from traces.record import ReadMode, TraceRequest
from traces.summary import summarize

from .raw_http import PROTOCOL_FAILURES, Connection, IdleTimeout, Response, Target, resolve
from .sse_parser import Comment, SSEEvent, SSEParser
from ..server.validation import REQUEST_ID

log = logging.getLogger(__name__)

LAG_WARN_S = 0.020
"""A request sent later than this after its scheduled arrival is reported."""
STREAM_PATH = "/v1/stream"
TAIL_TIMEOUT_S = 1.0
"""How long a finished stream's last bytes are waited for before closing anyway."""


@dataclass(frozen=True, slots=True)
class PromptFiller:
    """Token ids for a prompt the trace knows only by its length: ids cycling over
    [low, high), starting at a place fixed by the request id, so a replay sends the
    same prompts every time and prompts differ from each other (no shared prefix
    for a prefix cache to exploit). The ids must be in the served model's vocab."""

    low: int = 1000
    high: int = 2000

    def __call__(self, request: TraceRequest) -> list[int]:
        span = self.high - self.low
        start = zlib.crc32(request.id.encode()) % span
        return [self.low + (start + i) % span for i in range(request.prompt_tokens)]


@dataclass(slots=True)
class LiveReplay:
    outcomes: list[RequestOutcome]
    """In the order of the requests given."""
    started_unix: float
    """Wall-clock time of the replay's start: time 0 of every record."""
    duration_s: float
    """From the start until the last request ended."""
    stats_before: dict | None
    stats_after: dict | None
    """The server's /stats before the first request and after the last, once the
    server had no running or waiting request left (None if it could not be read)."""
    wasted_tokens_total: int | None
    """Tokens the server made after their client had left, over the replay."""
    max_lag_s: float
    """The latest any request was sent after its scheduled arrival."""
    problems: dict[str, str] = field(default_factory=dict)
    """Request id to what went wrong: a connection that failed (the record says
    refused), an `error` event, a broken stream or an idle timeout (the record's
    finish_reason is "error")."""


class _Ending(enum.Enum):
    FINISHED = "finished"
    """The stream's last event was read."""
    LEAVE = "leave"
    """The client's token budget is reached: it leaves."""
    REFUSED = "refused"
    BROKEN = "broken"
    """The connection or the protocol failed."""


def _refusal(status: int, body: bytes) -> str:
    """"<status> <message>", the message taken from the JSON error envelope."""
    message = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(message)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict):
            error = error.get("message") or error.get("detail") or error
        message = error if isinstance(error, str) else json.dumps(error)
    return f"{status} {message[:300]}"


def request_body(request: TraceRequest, prompt_filler: Callable[[TraceRequest], list[int]]) -> dict:
    """The `POST /v1/stream` body for one trace request."""
    body: dict = {"max_new_tokens": request.max_new_tokens, "temperature": request.temperature,
                  "top_p": request.top_p, "top_k": request.top_k,
                  "ignore_eos": request.ignore_eos}
    if request.seed is not None:
        body["seed"] = request.seed
    if request.prompt is not None:
        body["prompt"] = request.prompt
    else:
        body["prompt_tokens"] = prompt_filler(request)
    return body


class _ReplayedRequest:
    """One request of the replay, from connecting to closing, filling its outcome."""

    def __init__(self, request: TraceRequest, replay: _Replay):
        self.request = request
        self.replay = replay
        self.outcome = RequestOutcome(request.id, 0.0, request.prompt_tokens,
                                      request.max_new_tokens)
        self.problem: str | None = None
        self.server_id = replay.server_id(request)

    async def run(self) -> None:
        replay, client, o = self.replay, self.request.client, self.outcome
        async with replay.connection_slots:
            try:
                connection = await Connection.open(
                    replay.target, idle_timeout_s=replay.timeout_s,
                    recv_buffer_bytes=replay.recv_buffer_bytes,
                    bytes_per_s=client.bytes_per_s if client.read is ReadMode.BYTE_RATE else None)
            except OSError as exc:
                o.arrival_s = replay.now()
                o.refused = self.problem = f"connection failed: {exc}"
                return
            o.arrival_s = replay.now()
            leave_at = (None if client.leave_after_s is None
                        else replay.loop_start + o.arrival_s + client.leave_after_s)
            response = Response(connection)
            ending = _Ending.LEAVE
            time_up = asyncio.timeout_at(leave_at)
            try:
                async with time_up:
                    ending = await self._exchange(connection, response)
            except TimeoutError as exc:
                if not time_up.expired():  # a socket's own timeout, not the client's
                    ending = self._broken(exc)
            except PROTOCOL_FAILURES as exc:
                ending = self._broken(exc)
            if ending is _Ending.LEAVE:
                o.left_s = replay.now()
                connection.close(client.leave_how)
            else:
                if ending is _Ending.FINISHED:
                    await self._read_to_end(response)
                connection.close()
            if o.finish_reason in (None, "error"):
                o.tokens_generated = o.tokens_read

    def _broken(self, exc: BaseException) -> _Ending:
        self.problem = f"{type(exc).__name__}: {exc}"
        self.outcome.finish_reason, self.outcome.finish_s = "error", self.replay.now()
        return _Ending.BROKEN

    async def _exchange(self, connection: Connection, response: Response) -> _Ending:
        body = json.dumps(request_body(self.request, self.replay.prompt_filler)).encode()
        await connection.post_json(STREAM_PATH, body, accept="text/event-stream",
                                   request_id=self.server_id)
        await response.read_head()
        self.outcome.headers_s = self.replay.now()
        if response.status != 200:
            self.outcome.refused = _refusal(response.status, await response.read_all())
            return _Ending.REFUSED
        if self.request.client.leave_after_tokens == 0:
            return _Ending.LEAVE
        parser = SSEParser()
        while data := await response.read_body():
            for item in parser.feed(data):
                if isinstance(item, Comment):
                    continue  # a keep-alive
                ending = self._take(item)
                if ending is not None:
                    return ending
                if item.event == "token" and self.request.client.read is ReadMode.PER_EVENT:
                    # The pause the simulator makes after each token it takes.
                    await asyncio.sleep(self.request.client.pause_s)
        if self.outcome.finish_reason == "error":
            return _Ending.FINISHED  # an error event, and no done after it
        raise ConnectionError("the stream ended without a done event")

    def _take(self, event: SSEEvent) -> _Ending | None:
        o, now = self.outcome, self.replay.now()
        data = json.loads(event.data)
        if event.event == "start":
            o.prompt_tokens = data["prompt_tokens"]
        elif event.event == "token":
            if not o.tokens_read:
                o.first_token_client_s = now
            o.token_times_s.append(now)
            o.tokens_read += 1
            if o.tokens_read == self.request.client.leave_after_tokens:
                return _Ending.LEAVE
        elif event.event == "done":
            o.finish_reason = data["finish_reason"]
            o.tokens_generated = data["usage"]["completion_tokens"]
            timing = data["timing"]
            o.admitted_s = self.replay.from_unix(timing.get("admitted"))
            o.first_token_engine_s = self.replay.from_unix(timing.get("first_token"))
            o.finish_s = now  # when this client saw the end, as the simulator records it
            return _Ending.FINISHED
        elif event.event == "error":
            # The server follows it with a done "error", whose usage and timing
            # replace these; a stream that ends here has finished all the same.
            o.finish_reason, o.finish_s = "error", now
            self.problem = f"error event: {data.get('error', data)}"
        return None

    @staticmethod
    async def _read_to_end(response: Response) -> None:
        """Take the rest of the body (its last chunk), so that closing sends a clean
        FIN rather than a reset over unread bytes. The stream is over: a failure
        here changes nothing in the record."""
        try:
            async with asyncio.timeout(TAIL_TIMEOUT_S):
                await response.read_all()
        except (OSError, IdleTimeout):  # TimeoutError is an OSError
            pass


class _Replay:
    """Settings and clocks shared by the requests of one replay."""

    def __init__(self, target: Target, *, time_scale: float, max_connections: int | None,
                 prompt_filler: Callable[[TraceRequest], list[int]], timeout_s: float,
                 recv_buffer_bytes: int | None, request_id_prefix: str | None):
        self.target = target
        self.request_id_prefix = request_id_prefix
        self.time_scale = time_scale
        self.connection_slots = (asyncio.Semaphore(max_connections) if max_connections
                                 else contextlib.nullcontext())
        self.prompt_filler = prompt_filler
        self.timeout_s = timeout_s
        self.recv_buffer_bytes = recv_buffer_bytes
        self.loop = asyncio.get_running_loop()
        self.loop_start = self.loop.time()
        self.wall_start = time.time()

    def now(self) -> float:
        return self.loop.time() - self.loop_start

    def server_id(self, request: TraceRequest) -> str | None:
        """The id to name `request`'s stream by, if the replay names streams."""
        if self.request_id_prefix is None:
            return None
        name = self.request_id_prefix + request.id
        return name if REQUEST_ID.fullmatch(name) else None

    def from_unix(self, t: float | None) -> float | None:
        return None if t is None else t - self.wall_start

    async def send_all(self, requests: list[TraceRequest]) -> list[_ReplayedRequest]:
        """Starts each request at its arrival (scaled) and waits for all to end. A
        request never waits for another: each runs in its own task."""
        replayed = [_ReplayedRequest(r, self) for r in requests]
        tasks = []
        for item in sorted(replayed, key=lambda x: x.request.arrival_s):
            delay = item.request.arrival_s * self.time_scale - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(item.run()))
        await asyncio.gather(*tasks)
        return replayed


async def _stats(client: httpx.AsyncClient) -> dict | None:
    try:
        response = await client.get("/stats")
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        log.warning("could not read /stats: %s", exc)
        return None


def _finished(stats: dict) -> int:
    return sum(stats.get("finished", {}).values())


async def _settled_stats(client: httpx.AsyncClient, settle_s: float,
                         finished_at_least: int) -> dict | None:
    """/stats once the server has nothing running or waiting and has taken the
    engine's end of `finished_at_least` streams in all (the last leavers' cancels
    take effect a step after they left, and the tokens of that step count only once
    its events reach the hub), or after `settle_s` at most."""
    deadline = time.monotonic() + settle_s
    while True:
        stats = await _stats(client)
        busy = stats is not None and bool(
            stats.get("running") or stats.get("waiting")
            or ("finished" in stats and _finished(stats) < finished_at_least))
        if not busy or time.monotonic() >= deadline:
            return stats
        await asyncio.sleep(0.05)


async def replay_async(base_url: str, requests: list[TraceRequest], *, time_scale: float = 1.0,
                       max_connections: int | None = None,
                       prompt_filler: Callable[[TraceRequest], list[int]] = PromptFiller(),
                       timeout_s: float = 60.0, recv_buffer_bytes: int | None = None,
                       settle_s: float = 5.0, request_id_prefix: str | None = None) -> LiveReplay:
    """Replays `requests` against the server at `base_url` (`POST /v1/stream`).

    time_scale: arrival times are multiplied by it (0.5 replays twice as fast);
      the clients' own pauses and leave times are not scaled.
    max_connections: at most this many requests open at once; a request that waits
      for a slot is sent late, and its arrival_s says when it was sent.
    prompt_filler: the token ids sent for a request the trace gives only as a
      token count.
    timeout_s: a request that receives nothing for this long is given up as an error.
    recv_buffer_bytes: SO_RCVBUF of every client socket (None: the OS default,
      which grows to megabytes); small values make a slow reader's backlog reach
      the server sooner.
    request_id_prefix: name each stream `<prefix><trace id>` (`X-Request-Id`), so
      that the server's records of them (`GET /v1/requests`) can be found; a trace
      id that would not make a valid request id is left to the server to name.
    """
    if not time_scale > 0:
        raise ValueError(f"time_scale must be positive, got {time_scale}")
    target = await resolve(base_url)
    # trust_env off: a proxy set in the environment must not come between the
    # replay and the server it measures.
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, trust_env=False) as http:
        stats_before = await _stats(http)
        replay = _Replay(target, time_scale=time_scale, max_connections=max_connections,
                         prompt_filler=prompt_filler, timeout_s=timeout_s,
                         recv_buffer_bytes=recv_buffer_bytes, request_id_prefix=request_id_prefix)
        replayed = await replay.send_all(requests)
        duration_s = replay.now()
        # Every stream the server accepted ends in its engine, however its client left.
        accepted = sum(1 for r in replayed
                       if r.outcome.headers_s is not None and r.outcome.refused is None)
        finished_before = _finished(stats_before) if stats_before is not None else 0
        stats_after = await _settled_stats(http, settle_s, finished_before + accepted)
    lags = [r.outcome.arrival_s - r.request.arrival_s * time_scale for r in replayed]
    late = [lag for lag in lags if lag > LAG_WARN_S]
    if late:
        log.warning("%d of %d requests were sent more than %.0f ms after their arrival "
                    "(at worst %.0f ms)", len(late), len(lags), LAG_WARN_S * 1e3, max(late) * 1e3)
    problems = {r.request.id: r.problem for r in replayed if r.problem}
    for rid, problem in problems.items():
        log.warning("request %s: %s", rid, problem)
    wasted = None
    if stats_before is not None and stats_after is not None and "tokens_after_leave" in stats_after:
        wasted = stats_after["tokens_after_leave"] - stats_before.get("tokens_after_leave", 0)
    return LiveReplay(
        outcomes=[r.outcome for r in replayed], started_unix=replay.wall_start,
        duration_s=duration_s, stats_before=stats_before, stats_after=stats_after,
        wasted_tokens_total=wasted, max_lag_s=max(lags, default=0.0), problems=problems)


def replay(base_url: str, requests: list[TraceRequest], **options) -> LiveReplay:
    """`replay_async` on its own event loop; the options are the same."""
    return asyncio.run(replay_async(base_url, requests, **options))


def format_replay(result: LiveReplay) -> str:
    """What `python -m live replay` prints: the replay's `Summary`, with the
    server's count of tokens made after their client left."""
    s = summarize(result.outcomes, wasted_tokens=result.wasted_tokens_total)
    reasons = Counter(o.finish_reason for o in result.outcomes
                      if o.refused is None and o.left_s is None)
    lines = [
        f"requests {s.requests}, refused {s.refused}, left {s.left}",
        "finished: " + (", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
                        or "none"),
    ]
    if s.ttft_client_p50_s is not None:
        lines.append(f"TTFT (client) p50 {s.ttft_client_p50_s * 1e3:.1f} ms, "
                     f"p99 {s.ttft_client_p99_s * 1e3:.1f} ms")
    if s.gap_p50_s is not None:
        lines.append(f"inter-token gap p50 {s.gap_p50_s * 1e3:.1f} ms, "
                     f"p99 {s.gap_p99_s * 1e3:.1f} ms; each stream's longest "
                     f"p50 {s.stall_p50_s * 1e3:.1f} ms, p99 {s.stall_p99_s * 1e3:.1f} ms")
    if s.throughput_tok_s is not None:
        lines.append(f"throughput {s.throughput_tok_s:.1f} tokens/s "
                     f"({s.tokens_generated} generated in {s.makespan_s:.2f} s)")
    wasted = "unknown (no /stats)" if result.wasted_tokens_total is None else s.wasted_tokens
    lines.append(f"wasted tokens (made after their client left) {wasted}")
    if result.problems:
        lines.append(f"problems {len(result.problems)} (see the log)")
    return "\n".join(lines)


def add_parser(subparsers) -> None:
    """Registers `replay` on the `python -m live` command line."""
    p = subparsers.add_parser("replay", help="replay a trace against a live server")
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--trace", required=True, help="a trace file, in any format traces reads")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply arrival times by this (0.5: twice as fast)")
    p.add_argument("--max-connections", type=int, default=None)
    p.add_argument("--timeout-s", type=float, default=60.0,
                   help="give a request up after this long without a byte")
    p.add_argument("--out", help="write the per-request records here (JSONL)")
    p.add_argument("--request-id-prefix", metavar="P",
                   help="name each stream P<trace id> (X-Request-Id), to find the server's "
                        "record of it at GET /v1/requests")
    p.set_defaults(func=run_replay_command)


def run_replay_command(args) -> int:
    from traces import load_trace
    from traces.outcome import write_outcomes

    requests = load_trace(args.trace)
    result = replay(args.url, requests, time_scale=args.time_scale,
                    max_connections=args.max_connections, timeout_s=args.timeout_s,
                    request_id_prefix=args.request_id_prefix)
    if args.out:
        write_outcomes(args.out, result.outcomes)
    print(format_replay(result))
    return 0
