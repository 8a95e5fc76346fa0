"""A plain-socket HTTP/1.1 client for streamed responses, the load generator's
transport.

Each request is one connection on a non-blocking socket, written and parsed here
rather than through an HTTP library, for two reasons. A slow client must really
stop reading: asyncio's StreamReader (and every library built on it) reads ahead
up to 256 KiB at a time, which would hide from the server that its reader has
stalled; here the socket is read only when the client wants bytes, so the TCP
window fills and the server feels backpressure. And leaving must be exactly what
the client chooses: FIN by shutdown and close, RST by SO_LINGER 0.
"""
from __future__ import annotations

import asyncio
import socket
import struct
from dataclasses import dataclass
from urllib.parse import urlsplit

from traces.record import LeaveHow

READ_CHUNK = 16 * 1024
"""Most bytes one read takes from a socket."""
BYTE_RATE_READS_PER_S = 50
"""A byte-rate reader takes its allowance in this many small reads a second, so
its socket drains smoothly rather than in bursts."""
MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Target:
    """Where requests go: a resolved address, and what names it in a request."""

    family: int
    address: tuple
    host_header: str
    path_prefix: str
    """The base URL's path, prepended to every request's path."""


async def resolve(base_url: str) -> Target:
    """The target of a plain `http://host[:port][/prefix]` URL."""
    url = urlsplit(base_url)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"expected a plain http://host:port URL, got {base_url!r}")
    host, port = url.hostname, url.port or 80
    family, _, _, _, address = (await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM))[0]
    return Target(family, address, f"{host}:{port}", url.path.rstrip("/"))


class IdleTimeout(Exception):
    """Nothing arrived on a connection for longer than its idle timeout."""


PROTOCOL_FAILURES = (OSError, ValueError, KeyError, TypeError, AttributeError, IdleTimeout)
"""What a broken connection or a malformed response raises while a request is read."""


class Connection:
    """One client's TCP connection, read only on demand, at most `bytes_per_s`
    when that is set (counting every byte: headers, chunk framing, events)."""

    def __init__(self, sock: socket.socket, target: Target, bytes_per_s: float | None,
                 idle_timeout_s: float):
        self._sock = sock
        self._target = target
        self._loop = asyncio.get_running_loop()
        self._idle_timeout_s = idle_timeout_s
        self._bytes_per_s = bytes_per_s
        self._chunk = (max(1, min(READ_CHUNK, int(bytes_per_s / BYTE_RATE_READS_PER_S)))
                       if bytes_per_s else READ_CHUNK)
        self._opened = self._loop.time()
        self._bytes_read = 0

    @classmethod
    async def open(cls, target: Target, *, bytes_per_s: float | None, idle_timeout_s: float,
                   recv_buffer_bytes: int | None) -> Connection:
        sock = socket.socket(target.family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if recv_buffer_bytes:
                # Before connecting: the window scale is agreed in the handshake.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer_bytes)
            await asyncio.get_running_loop().sock_connect(sock, target.address)
        except BaseException:
            sock.close()
            raise
        return cls(sock, target, bytes_per_s, idle_timeout_s)

    async def post_json(self, path: str, body: bytes, *, accept: str,
                        request_id: str | None = None, api_key: str | None = None) -> None:
        """Send one `POST` of a JSON body; the server closes the connection after it."""
        head = (f"POST {self._target.path_prefix}{path} HTTP/1.1\r\n"
                f"Host: {self._target.host_header}\r\n"
                "User-Agent: twinstep-loadgen\r\n"
                + (f"X-Request-Id: {request_id}\r\n" if request_id else "")
                + (f"Authorization: Bearer {api_key}\r\n" if api_key else "")
                + f"Accept: {accept}\r\n"
                "Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n")
        await self._loop.sock_sendall(self._sock, head.encode("latin-1") + body)

    async def recv(self) -> bytes:
        """The next bytes, b"" at the end of the stream."""
        if self._bytes_per_s:
            # Paced against the connection's whole life, so the average rate holds
            # however late each sleep wakes.
            delay = self._opened + self._bytes_read / self._bytes_per_s - self._loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        try:
            async with asyncio.timeout(self._idle_timeout_s):
                data = await self._loop.sock_recv(self._sock, self._chunk)
        except TimeoutError:
            raise IdleTimeout(f"nothing received for {self._idle_timeout_s} s") from None
        self._bytes_read += len(data)
        return data

    def close(self, how: LeaveHow = LeaveHow.FIN) -> None:
        if how is LeaveHow.RST:
            # Linger on, for 0 s: close discards what is unsent and resets the peer.
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            # FIN first, whatever is still unread. (Closing with unread bytes then
            # also sends an RST after the FIN, as any HTTP client closing early does;
            # the server has seen the end of the stream first.)
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self._sock.close()


class ChunkedBody:
    """Decodes `Transfer-Encoding: chunked` as bytes arrive."""

    _SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)

    def __init__(self):
        self._pending = bytearray()
        self._state = self._SIZE
        self._remaining = 0

    @property
    def complete(self) -> bool:
        return self._state == self._DONE

    def feed(self, data: bytes) -> bytes:
        self._pending += data
        out = bytearray()
        while self._state != self._DONE:
            if self._state == self._DATA:
                take = min(self._remaining, len(self._pending))
                if not take:
                    break
                out += self._pending[:take]
                del self._pending[:take]
                self._remaining -= take
                if not self._remaining:
                    self._state = self._DATA_END
                continue
            end = self._pending.find(b"\r\n")
            if end < 0:
                break
            line = bytes(self._pending[:end])
            del self._pending[:end + 2]
            if self._state == self._SIZE:
                try:
                    self._remaining = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ConnectionError(f"bad chunk size line {line[:40]!r}") from None
                self._state = self._DATA if self._remaining else self._TRAILER
            elif self._state == self._DATA_END:
                if line:
                    raise ConnectionError("chunk data longer than its size")
                self._state = self._SIZE
            elif not line:  # the blank line that ends the trailers
                self._state = self._DONE
        return bytes(out)


class Response:
    """An HTTP/1.1 response read from a connection: the head, then the body's
    bytes as they arrive, framed by chunked encoding, Content-Length, or the end
    of the connection."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._pending = b""
        self._chunked: ChunkedBody | None = None
        self._left: int | None = None
        self._body_ended = False
        self.status = 0
        self.headers: dict[str, str] = {}

    async def read_head(self) -> None:
        buffer = b""
        while (end := buffer.find(b"\r\n\r\n")) < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise ConnectionError("response head too large")
            data = await self._connection.recv()
            if not data:
                raise ConnectionError("connection closed before the response head")
            buffer += data
        lines = buffer[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ConnectionError(f"bad status line {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip()
            self.headers[name] = f"{self.headers[name]}, {value}" if name in self.headers else value
        self._pending = buffer[end + 4:]
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._chunked = ChunkedBody()
        elif "content-length" in self.headers:
            self._left = int(self.headers["content-length"])
            self._body_ended = self._left == 0

    async def read_body(self) -> bytes:
        """The body's next bytes; b"" once it has ended (or was cut short)."""
        while not self._body_ended:
            data, self._pending = self._pending or await self._connection.recv(), b""
            if not data:
                self._body_ended = True
            elif self._chunked is not None:
                data = self._chunked.feed(data)
                self._body_ended = self._chunked.complete
            elif self._left is not None:
                data = data[:self._left]
                self._left -= len(data)
                self._body_ended = self._left == 0
            if data:
                return data
        return b""

    async def read_all(self) -> bytes:
        pieces = []
        while piece := await self.read_body():
            pieces.append(piece)
        return b"".join(pieces)
