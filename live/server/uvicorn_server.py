"""The uvicorn server that runs the app: every connection without Nagle's delay,
HTTP/2 with backpressure when asked, and a graceful stop at the signal."""
from __future__ import annotations

import signal
import socket

import uvicorn
from starlette.applications import Starlette

from .h2_flow import AutoBackpressuredProtocol
from .service import LiveService


class NoDelay:
    """Mixed into uvicorn's protocol: TCP_NODELAY on every connection, so that each
    event leaves at once rather than waiting on Nagle for the previous one's ACK.
    asyncio sets it only when the listening socket says IPPROTO_TCP, which a socket
    handed over by a supervisor or a test often does not."""

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


class LiveConfig(uvicorn.Config):
    """uvicorn's settings, with `NoDelay` mixed into whichever protocol they choose,
    and with `http2` the same choice of protocol per connection (the HTTP/2 preface,
    or HTTP/1.1) but HTTP/2 with backpressure (`h2_flow`)."""

    def load(self) -> None:
        super().load()
        chosen = AutoBackpressuredProtocol if self.http2 else self.http_protocol_class
        self.http_protocol_class = type(f"NoDelay{chosen.__name__}", (NoDelay, chosen), {})


class LiveServer(uvicorn.Server):
    """uvicorn, with the hub told at the signal (not after the connections close,
    when the lifespan ends) so that open streams get their last event at once; and
    an exit status of 0 after a graceful stop rather than the signal re-raised.
    With `settings.http2`, cleartext HTTP/2 (h2c with prior knowledge) and
    HTTP/1.1 on the same port."""

    def __init__(self, app: Starlette, host: str, port: int, log_level: str = "info"):
        self.service: LiveService = app.state.service
        settings = self.service.settings
        super().__init__(LiveConfig(
            app, host=host, port=port, log_level=log_level, lifespan="on",
            http="zttp" if settings.http2 else "auto", http2=settings.http2,
            timeout_graceful_shutdown=settings.shutdown_timeout_s))

    def handle_exit(self, sig, frame) -> None:
        self.service.request_shutdown()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl+C
        else:
            self.should_exit = True
