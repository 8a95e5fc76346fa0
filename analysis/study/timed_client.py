"""Requests sent through one HTTP client of a few connections, as a browser or an
SDK holds them (the load generator opens a connection per request), and when
each one's first token and its end arrived."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from live.client.request_body import PromptFiller, request_body
from live.client.sse_parser import SSEEvent, SSEParser
from traces import TraceRequest


@dataclass
class Timing:
    """Seconds from the start of the sending."""

    first_event_s: float | None
    first_token_s: float | None
    end_s: float


def over_one_client(url: str, trace: list[TraceRequest], connections: int, http2: bool,
                    api_key: str | None = None) -> dict[str, Timing]:
    """Each request of `trace` sent at its arrival through one httpx client of at
    most `connections` connections (HTTP/2 with prior knowledge: one connection,
    a stream each), read as it comes: when its first event, its first token and its
    end arrived. The client accepts gzip, as httpx does by default; it sends
    `api_key` to a server with keys.

    The requests are tasks on one event loop, not threads: httpcore's sync HTTP/2
    connection lets threads drive its one `h2` state machine unlocked, so streams
    opened at once could go out with their HEADERS out of stream-id order (or twice
    on one id, or HPACK-encoded out of turn), which a server must refuse with a
    GOAWAY for the whole connection. On one loop each stream's frames are made and
    queued in one go."""
    return asyncio.run(_over_one_client(url, trace, connections, http2, api_key))


async def _over_one_client(url: str, trace: list[TraceRequest], connections: int, http2: bool,
                           api_key: str | None) -> dict[str, Timing]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    filler = PromptFiller()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with httpx.AsyncClient(base_url=url, http1=not http2, http2=http2, limits=limits,
                                 trust_env=False, timeout=120.0, headers=headers) as client:
        start = time.monotonic()

        async def send(request: TraceRequest) -> Timing:
            await asyncio.sleep(max(0.0, request.arrival_s - (time.monotonic() - start)))
            parser, first, first_token = SSEParser(), None, None
            async with client.stream("POST", "/v1/stream",
                                     json=request_body(request, filler)) as r:
                r.raise_for_status()
                async for chunk in r.aiter_bytes():
                    for event in parser.feed(chunk):
                        if not isinstance(event, SSEEvent):
                            continue
                        now = time.monotonic() - start
                        first = now if first is None else first
                        if first_token is None and event.event == "token":
                            first_token = now
            return Timing(first, first_token, time.monotonic() - start)

        timings = await asyncio.gather(*(send(r) for r in trace))
        return dict(zip((r.id for r in trace), timings))
