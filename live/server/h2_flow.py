"""HTTP/2 with backpressure. uvicorn's HTTP/2 protocol (zttp's) parks the bytes a
client's flow-control window cannot take yet and returns from `send` at once, so a
stream whose reader stalls never makes its writer wait: the hub would see no
backlog, and `pause` and `drop` would never act, while the server kept every byte.
Here a response's `send` waits while its stream has bytes parked, until the client
grants credit, resets the stream or goes away. A slow HTTP/2 reader then backs up
into its stream's queue exactly as one over HTTP/1.1 does when the socket fills.
And a response that gives up on its client (`sse.ABORT`) resets its own stream
(RST_STREAM, its parked bytes dropped), not the connection its siblings share;
the bytes a response still holds for its client (`sse.UNSENT`) are its stream's
parked bytes, not the connection's, which its siblings share too, and whether its
client has gone (`sse.GONE`) is whether its stream has."""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.auto_zttp_impl import AutoZttpProtocol
from uvicorn.protocols.http.zttp_h2_impl import ZttpH2Protocol
from uvicorn.protocols.http.zttp_impl import ZttpProtocol

from .sse import ABORT, GONE, UNSENT


class BackpressuredH2(ZttpH2Protocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._credit = asyncio.Event()
        """Set (and replaced) whenever frames arrive or the connection goes: what a
        parked send waits for before looking again."""

    def handle_request(self, event) -> None:
        super().handle_request(event)
        cycle = self.cycles.get(event.stream_id)
        if cycle is not None:
            # run_asgi looks `send` up when its task starts, after this returns
            cycle.send = self._within_window(cycle, cycle.send)
            cycle.scope["state"][ABORT] = cycle.abort_stream
            cycle.scope["state"][UNSENT] = lambda: cycle.stream.pending_bytes or 0
            cycle.scope["state"][GONE] = lambda: cycle.disconnected

    def _within_window(self, cycle, send):
        async def send_within_window(message) -> None:
            await send(message)
            while not cycle.disconnected and (cycle.stream.pending_bytes or 0) > 0:
                await self._credit.wait()
        return send_within_window

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._wake()

    def _wake(self) -> None:
        credit, self._credit = self._credit, asyncio.Event()
        credit.set()


class AutoBackpressuredProtocol(AutoZttpProtocol):
    """uvicorn's choice between HTTP/1.1 and HTTP/2 on one port (the HTTP/2
    preface, or ALPN over TLS), with `BackpressuredH2` for HTTP/2."""

    def _switch(self, http2: bool, initial_data: bytes = b"") -> None:
        chosen = BackpressuredH2 if http2 else ZttpProtocol
        protocol = chosen(config=self.config, server_state=self.server_state,
                          app_state=self.app_state, _loop=self.loop)
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        if initial_data:
            protocol.data_received(initial_data)
