"""Server-sent events on the way out: the bytes of one event or comment, and the
streaming response, a small ASGI app that writes a hub reader's events as they
come and notices the client leaving by awaiting `http.disconnect` itself."""
from __future__ import annotations

import asyncio
import re
from json.encoder import encode_basestring
from typing import Protocol

from ..streams.stream import Reader
from ..streams.events import HubEvent

_LINE_END = re.compile(r"\r\n|\r|\n")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    # no-transform: a proxy that compresses or rewrites responses holds events back
    (b"cache-control", b"no-cache, no-transform"),
    # nginx and friends buffer responses unless told not to
    (b"x-accel-buffering", b"no"),
]


def event_bytes(data: str, event: str | None = None, id: str | None = None) -> bytes:
    """One event; data with line ends becomes several `data:` lines, which a parser
    joins back with LF."""
    lines = []
    if id is not None:
        if "\n" in id or "\r" in id or "\0" in id:
            raise ValueError(f"an event id cannot hold a line end or NUL: {id!r}")
        lines.append(f"id: {id}")
    if event is not None:
        if _LINE_END.search(event):
            raise ValueError(f"an event name cannot hold a line end: {event!r}")
        lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in _LINE_END.split(data))
    return ("\n".join(lines) + "\n\n").encode()


class TokenTemplate:
    """A format's token event as the bytes around its text: the event rendered
    once with a marker for the text, so that each token costs one JSON string
    encoding and a join, byte for byte what rendering it whole gives (its text
    is the one part that changes, and a JSON string holds no line end)."""

    MARK = "\u2060twinstep-text\u2060"

    def __init__(self, rendered: bytes):
        marked = encode_basestring(self.MARK).encode()
        if rendered.count(marked) != 1:
            raise ValueError("the marker must appear once in the rendered event")
        self.before, self.after = rendered.split(marked)

    def __call__(self, text: str) -> bytes:
        return b"".join((self.before, encode_basestring(text).encode(), self.after))


def comment_bytes(text: str) -> bytes:
    """A comment: parsers skip it, proxies and idle timers see traffic."""
    return ("\n".join(f": {line}" for line in _LINE_END.split(text)) + "\n\n").encode()


KEEPALIVE = comment_bytes("keep-alive")


def retry_line(ms: int) -> bytes:
    """A `retry:` field, which an EventSource takes as its reconnection time. It goes
    in an event's block: some parsers (httpx-sse) would dispatch an empty event for
    a block with nothing else."""
    return f"retry: {ms}\n".encode()


WRITE_BYTES = 64 * 1024
"""The most a stream's write gathers of its queued events (it takes at least one):
within a socket buffer, so that a slow reader's queue stays in the server, where
the backlog policy sees it."""

ABORT = "twinstep.abort"
"""The key, in a request's `scope["state"]`, of what the server gives a response
to drop the request's connection at once (over HTTP/2, to reset its stream)."""

UNSENT = "twinstep.unsent"
"""The key, in a request's `scope["state"]`, of what the server gives a response
to learn how many bytes it has written that its client has not taken yet (over
HTTP/2, those parked for its stream's window)."""

GONE = "twinstep.gone"
"""The key, in a request's `scope["state"]`, of what the server gives a response
to learn whether its client's connection (over HTTP/2, its stream) has gone: a
response that does not listen for the disconnect sees it only there, after a
write (uvicorn's `send` to a gone client returns as if it had written)."""


class ClientGone(Exception):
    """A write found the client's connection gone."""


class Renderer(Protocol):
    """A wire format's view of one stream."""

    keepalive: bytes

    def render(self, event: HubEvent) -> bytes:
        """The bytes for `event`; may be empty (an event the format does not show)."""


async def wait_for_disconnect(receive) -> None:
    """Return when the client has gone. The request body has been read by now, so
    anything else `receive` gives is ignored."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def drop_connection(scope) -> None:
    """Drop the request's connection, if the server says how."""
    abort = scope.get("state", {}).get(ABORT)
    if abort is not None:
        abort()
        # let the protocol learn the connection is lost before the app returns, so
        # that uvicorn takes the unfinished response for the client's going
        await asyncio.sleep(0)


class EventStreamResponse:
    """Writes `reader`'s events through `renderer` until the stream's last event,
    with keep-alives while nothing comes for `keepalive_s`. Whichever ends first —
    the stream, the client (disconnect), or the hub cutting a stalled reader — the
    reader is detached once, saying whether its client left (a cut one counts as
    gone). A cut reader's connection is dropped, not closed: a graceful close waits
    to flush what its client does not read. The reader measures its client's
    progress by the bytes the server still holds for it, where the server says.
    Unless it `listen`s for the disconnect, the response learns that its client
    left only when a write finds the connection gone."""

    def __init__(self, reader: Reader, renderer: Renderer, keepalive_s: float,
                 headers: list[tuple[bytes, bytes]] = (), padding: int = 0,
                 opening: bytes = b"", listen: bool = True):
        """`opening`: lines the first event's block begins with (e.g. `retry_line`)."""
        self.reader = reader
        self.renderer = renderer
        self.keepalive_s = keepalive_s
        self.headers = SSE_HEADERS + list(headers)
        self.padding = comment_bytes("p" * padding) if padding else b""
        self.opening = opening
        self.listen = listen

    async def __call__(self, scope, receive, send) -> None:
        left = True
        state = scope.get("state", {})
        self.reader.measure(state.get(UNSENT))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            cut = asyncio.ensure_future(self.reader.cut.wait())
            if self.listen:
                writer = asyncio.ensure_future(self._write(send))
                tasks = (writer, cut, asyncio.ensure_future(wait_for_disconnect(receive)))
            else:
                writer = asyncio.ensure_future(self._write(_failing_when(send, state.get(GONE))))
                tasks = (writer, cut)
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if writer.done() and not writer.cancelled() and writer.exception() is None:
                left = False
            elif cut.done() and not cut.cancelled():
                await drop_connection(scope)
        finally:
            self.reader.detach(left=left)

    async def _write(self, send) -> None:
        """Each write carries every event already queued, up to `WRITE_BYTES`: one
        write a step for a reader that keeps up, fewer and larger for one that lags,
        and each write's cost is shared by its events."""
        reader, render, padding = self.reader, self.renderer.render, self.padding
        parts = [self.opening] if self.opening else []
        while True:
            if await reader.next(self.keepalive_s) is None:
                await send({"type": "http.response.body", "body": self.renderer.keepalive,
                            "more_body": True})
                continue
            taken, size, last = 0, 0, None
            for last in reader.ready():
                taken += 1
                body = render(last)
                if body:
                    parts.append(body)
                    size += len(body)
                    if padding:
                        parts.append(padding)
                        size += len(padding)
                if last.terminal or size >= WRITE_BYTES:
                    break
            if size:
                await send({"type": "http.response.body", "body": b"".join(parts),
                            "more_body": True})
                parts = []
            reader.ack(taken)
            if last.terminal:
                break
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _failing_when(send, gone):
    """`send`, raising `ClientGone` once a write finds the connection gone (as a
    write to a closed socket fails), where the server says how to tell."""
    if gone is None:
        return send

    async def send_or_fail(message) -> None:
        await send(message)
        if gone():
            raise ClientGone
    return send_or_fail
