"""The uvicorn server that runs the app: every connection without Nagle's delay
and telling its responses what it still holds for their client, a deadline on
each request's head, a bound on open connections, HTTP/2 with backpressure when
asked, and a graceful stop at the signal."""
from __future__ import annotations

import functools
import signal
import socket
import struct

try:
    import fcntl
    import termios
except ImportError:  # not a POSIX system: a transport's buffer alone shows progress
    fcntl = termios = None

import uvicorn
from starlette.applications import Starlette

from .h2_flow import AutoBackpressuredProtocol
from .replies import envelope_for, refuse
from .service import LiveService
from .sse import ABORT, GONE, UNSENT
from .validation import ErrorKind, RequestError

_OUTQ = getattr(termios, "TIOCOUTQ", None)
"""Linux's SIOCOUTQ: the bytes in a TCP socket's send queue, not yet acknowledged."""


class NoDelay:
    """Mixed into uvicorn's protocol: TCP_NODELAY on every connection, so that each
    event leaves at once rather than waiting on Nagle for the previous one's ACK.
    asyncio sets it only when the listening socket says IPPROTO_TCP, which a socket
    handed over by a supervisor or a test often does not.

    Also the connection's abort, in each of its requests' scope state (`ABORT`):
    uvicorn hands the app no transport, and a response that gives up on a client
    must drop the connection rather than close it, which waits to flush to it. And
    for the same want of a transport, the bytes it still holds for the client
    (`UNSENT`), which show a slow client's progress while a write is pending, and
    whether the connection has gone (`GONE`)."""

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # each request's scope state is a copy of this, made per connection here
        # (and handed on to the protocol uvicorn's HTTP/2 choice switches to)
        self.app_state = {**self.app_state, ABORT: functools.partial(self._abort, transport),
                          UNSENT: functools.partial(self._unsent, transport),
                          GONE: transport.is_closing}
        super().connection_made(transport)

    @staticmethod
    def _abort(transport) -> None:
        """An RST at once, and whatever is buffered, here or in the kernel, discarded."""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.fileno() != -1:  # -1: closed already
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    @staticmethod
    def _unsent(transport) -> int:
        """The bytes written that the client has not taken: the transport's buffer,
        and the kernel's send queue where the system tells it (Linux). uvicorn's
        send returns only once the transport's buffer has drained, and the kernel
        wakes a writer only once a good share of its send buffer is free: one big
        event can take longer than a stall timeout to be written to a slow client
        that reads all along, and only these bytes going down show it."""
        held = transport.get_write_buffer_size()
        sock = transport.get_extra_info("socket")
        if _OUTQ is not None and sock is not None and sock.fileno() != -1:
            try:
                held += struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
            except OSError:
                pass
        return held


class HeaderDeadline:
    """Mixed into uvicorn's HTTP/1.1 protocols: a connection whose request head has
    not all come `header_timeout_s` after the connection opened or the previous
    response ended is closed. uvicorn alone waits for ever on a head sent a byte at
    a time (each byte stops its keep-alive timer)."""

    header_timeout_s: float

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._await_headers()

    def on_response_complete(self) -> None:
        self._await_headers()  # before uvicorn starts a request already sent
        super().on_response_complete()

    def _await_headers(self) -> None:
        answered = self.cycle  # a request whose head came has a cycle of its own

        def expire() -> None:
            if self.cycle is answered and not self.transport.is_closing():
                self.transport.close()
        self.loop.call_later(self.header_timeout_s, expire)


class ConnectionLimit:
    """ASGI wrapper: a request on a connection beyond `limit` open ones is answered
    503 in its API's envelope, with Retry-After, and its connection closed
    (uvicorn's own limit answers in plain text)."""

    def __init__(self, app: Starlette, service: LiveService, limit: int, server: uvicorn.Server):
        self.app = app
        self.service = service
        self.limit = limit
        self.server = server

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and len(self.server.server_state.connections) > self.limit:
            error = RequestError(ErrorKind.UNAVAILABLE,
                                 f"the server holds {self.limit} connections, its limit: "
                                 "retry later", retry_after_s=self.service.settings.retry_after_s)
            response = refuse(self.service, error, envelope_for(scope["path"]))
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class LiveConfig(uvicorn.Config):
    """uvicorn's settings, with `NoDelay` mixed into whichever protocol they choose
    (and `HeaderDeadline` into HTTP/1.1's), and with `http2` the same choice of
    protocol per connection (the HTTP/2 preface, or HTTP/1.1) but HTTP/2 with
    backpressure (`h2_flow`)."""

    def __init__(self, *args, header_timeout_s: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s

    def load(self) -> None:
        super().load()
        if self.http2:
            mixins, chosen = (NoDelay,), AutoBackpressuredProtocol
        else:
            mixins, chosen = (NoDelay, HeaderDeadline), self.http_protocol_class
        self.http_protocol_class = type(f"Live{chosen.__name__}", (*mixins, chosen),
                                        {"header_timeout_s": self.header_timeout_s})


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
            ConnectionLimit(app, self.service, settings.max_connections, self), host=host,
            port=port, log_level=log_level, lifespan="on",
            # httptools' C parser, not h11's pure Python: the loop is what limits the
            # serving path. asyncio's loop even where uvloop is installed: with the
            # engine in a process uvloop delivered fewer tokens/s (BENCHMARKS.md)
            loop="asyncio", http="zttp" if settings.http2 else "httptools",
            http2=settings.http2,
            timeout_graceful_shutdown=settings.shutdown_timeout_s,
            header_timeout_s=settings.header_timeout_s))

    def handle_exit(self, sig, frame) -> None:
        self.service.request_shutdown()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl+C
        else:
            self.should_exit = True
