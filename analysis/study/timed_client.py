"""Requests sent through one HTTP client of a few connections, as a browser or an
SDK holds them (the load generator opens a connection per request), and when
each one's first token and its end arrived."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
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
    `api_key` to a server with keys."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    filler = PromptFiller()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    with httpx.Client(base_url=url, http1=not http2, http2=http2, limits=limits,
                      trust_env=False, timeout=120.0, headers=headers) as client:
        start = time.monotonic()

        def send(request: TraceRequest) -> Timing:
            time.sleep(max(0.0, request.arrival_s - (time.monotonic() - start)))
            parser, first, first_token = SSEParser(), None, None
            with client.stream("POST", "/v1/stream", json=request_body(request, filler)) as r:
                r.raise_for_status()
                for chunk in r.iter_bytes():
                    for event in parser.feed(chunk):
                        if not isinstance(event, SSEEvent):
                            continue
                        now = time.monotonic() - start
                        first = now if first is None else first
                        if first_token is None and event.event == "token":
                            first_token = now
            return Timing(first, first_token, time.monotonic() - start)

        with ThreadPoolExecutor(len(trace)) as pool:
            return dict(zip((r.id for r in trace), pool.map(send, trace)))
