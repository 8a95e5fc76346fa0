"""One request of a replay against a live server: sent on its own HTTP/1.1
connection of `raw_http`, read only as fast as its client reads, left exactly as
the trace says (FIN or RST), and recorded in the schema the simulator writes
(`RequestOutcome`)."""
from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import time
from typing import Callable

from traces.outcome import Refusal, RequestOutcome
from traces.record import ReadMode, TraceRequest
from traces.names import REQUEST_ID

from .raw_http import PROTOCOL_FAILURES, Connection, IdleTimeout, Response, Target
from .refusal import refusal_for, refusal_message
from .request_body import request_body
from .sse_parser import Comment, SSEEvent, SSEParser

STREAM_PATH = "/v1/stream"
TAIL_TIMEOUT_S = 1.0
"""How long a finished stream's last bytes are waited for before closing anyway."""


class ReplaySetup:
    """Settings and the clock shared by the requests of one replay. Times are
    seconds from its start on the wall clock, the clock the server stamps its own
    times with: the loop's monotonic clock and the wall clock part by up to half a
    millisecond a second while NTP slews, enough to put a server's first token after
    the client read it."""

    def __init__(self, target: Target, *, time_scale: float, max_connections: int | None,
                 prompt_filler: Callable[[TraceRequest], list[int]], timeout_s: float,
                 recv_buffer_bytes: int | None, request_id_prefix: str | None,
                 credentials: dict[str | None, str]):
        self.target = target
        self.credentials = credentials
        """The secret each trace key name stands for; under None, the one sent for a
        request without a key name (none: sent without a key)."""
        self.request_id_prefix = request_id_prefix
        self.time_scale = time_scale
        self.connection_slots = (asyncio.Semaphore(max_connections) if max_connections
                                 else contextlib.nullcontext())
        self.prompt_filler = prompt_filler
        self.timeout_s = timeout_s
        self.recv_buffer_bytes = recv_buffer_bytes
        self.loop = asyncio.get_running_loop()
        self.wall_start = time.time()

    def now(self) -> float:
        return time.time() - self.wall_start

    def server_id(self, request: TraceRequest) -> str | None:
        """The id to name `request`'s stream by, if the replay names streams."""
        if self.request_id_prefix is None:
            return None
        name = self.request_id_prefix + request.id
        return name if REQUEST_ID.fullmatch(name) else None

    def secret(self, request: TraceRequest) -> str | None:
        return self.credentials.get(request.key)

    def from_unix(self, t: float | None) -> float | None:
        return None if t is None else t - self.wall_start


class _Ending(enum.Enum):
    FINISHED = "finished"
    """The stream's last event was read."""
    LEAVE = "leave"
    """The client's token budget is reached: it leaves."""
    REFUSED = "refused"
    BROKEN = "broken"
    """The connection or the protocol failed."""


class ReplayedRequest:
    """One request of the replay, from connecting to closing, filling its outcome
    and, when something went wrong, its `problem`."""

    def __init__(self, request: TraceRequest, setup: ReplaySetup):
        self.request = request
        self.setup = setup
        self.outcome = RequestOutcome(request.id, 0.0, request.prompt_tokens,
                                      request.max_new_tokens)
        self.problem: str | None = None
        self.server_id = setup.server_id(request)
        self.due_s = 0.0
        """When it was to be sent (replay seconds): its arrival, or its session's turn."""

    async def run(self) -> None:
        setup, client, o = self.setup, self.request.client, self.outcome
        async with setup.connection_slots:
            try:
                connection = await Connection.open(
                    setup.target, idle_timeout_s=setup.timeout_s,
                    recv_buffer_bytes=setup.recv_buffer_bytes,
                    bytes_per_s=client.bytes_per_s if client.read is ReadMode.BYTE_RATE else None)
            except OSError as exc:
                o.arrival_s = setup.now()
                o.refused = Refusal.UNREACHABLE
                self.problem = f"connection failed: {exc}"
                return
            o.arrival_s = setup.now()
            leave_at = (None if client.leave_after_s is None
                        else setup.loop.time() + client.leave_after_s)
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
                o.left_s = setup.now()
                connection.close(client.leave_how)
            else:
                if ending is _Ending.FINISHED:
                    await self._read_to_end(response)
                connection.close()
            if o.finish_reason in (None, "error"):
                o.tokens_generated = o.tokens_read

    def _broken(self, exc: BaseException) -> _Ending:
        self.problem = f"{type(exc).__name__}: {exc}"
        self.outcome.finish_reason, self.outcome.finish_s = "error", self.setup.now()
        return _Ending.BROKEN

    async def _exchange(self, connection: Connection, response: Response) -> _Ending:
        body = json.dumps(request_body(self.request, self.setup.prompt_filler)).encode()
        await connection.post_json(STREAM_PATH, body, accept="text/event-stream",
                                   request_id=self.server_id,
                                   api_key=self.setup.secret(self.request))
        await response.read_head()
        self.outcome.headers_s = self.setup.now()
        if response.status != 200:
            answer = await response.read_all()
            self.outcome.refused = refusal_for(response.status, answer)
            self.problem = refusal_message(response.status, answer)
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
        o, now = self.outcome, self.setup.now()
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
            o.admitted_s = self.setup.from_unix(timing.get("admitted"))
            o.first_token_engine_s = self.setup.from_unix(timing.get("first_token"))
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
