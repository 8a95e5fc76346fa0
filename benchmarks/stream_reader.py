"""A load client that costs as little as a client can: N streams read as fast as
they come, in a process of their own, over plain sockets (HTTP/1.1, a connection
a stream) or HTTP/2 connections of 100 streams each (the `h2` library). It counts
bytes and checks each stream's terminator, parsing nothing else, and prints one
JSON line: when the first request went out, when each stream's first byte of
body and its end came, the bytes read and the CPU time the client took.

    .venv/bin/python benchmarks/stream_reader.py --port P --format own --streams 256 --tokens 200 [--http2]
"""
from __future__ import annotations

import argparse
import json
import resource
import selectors
import socket
import sys
import time

PATHS = {"own": "/v1/stream", "chat": "/v1/chat/completions", "anthropic": "/v1/messages"}
ENDS = {"own": b"event: done", "chat": b"data: [DONE]", "anthropic": b"event: message_stop"}
PROMPT = "Tell me about the sea."


def body(fmt: str, tokens: int) -> bytes:
    if fmt == "own":
        payload = {"prompt": PROMPT, "max_new_tokens": tokens}
    elif fmt == "chat":
        payload = {"model": "default", "messages": [{"role": "user", "content": PROMPT}],
                   "max_tokens": tokens, "stream": True, "ignore_eos": True}
    else:
        payload = {"model": "default", "messages": [{"role": "user", "content": PROMPT}],
                   "max_tokens": tokens, "stream": True}
    return json.dumps(payload).encode()


def http1_request(port: int, fmt: str, tokens: int) -> bytes:
    payload = body(fmt, tokens)
    return (f"POST {PATHS[fmt]} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n").encode() + payload


def read_http1(port: int, fmt: str, streams: int, tokens: int) -> dict:
    """Every stream on its own connection, all read from one selector. A stream's
    end is the time its terminator came (the connection closes after it)."""
    sel = selectors.DefaultSelector()
    request = http1_request(port, fmt, tokens)
    end_mark = ENDS[fmt]
    first: dict[int, float] = {}
    ended: dict[int, float] = {}
    tails: dict[int, bytes] = {}
    total = 0
    sent = time.time()
    for i in range(streams):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request)
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, i)
        tails[i] = b""
    open_ = streams
    while open_:
        for key, _ in sel.select(timeout=60):
            sock, i = key.fileobj, key.data
            data = sock.recv(1 << 20)
            now = time.time()
            if i not in first:
                first[i] = now
            if data:
                total += len(data)
                seen = tails[i] + data
                if end_mark in seen:
                    ended[i] = now
                tails[i] = seen[-64:]
                continue
            sel.unregister(sock)
            sock.close()
            open_ -= 1
    return {"sent": sent, "first": list(first.values()), "ended": list(ended.values()),
            "bytes": total, "complete": len(ended)}


STREAMS_PER_CONNECTION = 100
"""HTTP/2 streams opened on one connection: within any server's concurrency
limit (RFC 9113 asks servers to allow at least 100)."""


class H2Connection:
    """One HTTP/2 connection (h2c, prior knowledge) carrying some of the streams."""

    def __init__(self, port: int, fmt: str, streams: int, tokens: int):
        import h2.config
        import h2.connection
        import h2.settings

        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
        conn.increment_flow_control_window(1 << 30)
        payload = body(fmt, tokens)
        self.tails: dict[int, bytes] = {}
        for _ in range(streams):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "POST"), (":path", PATHS[fmt]),
                                    (":scheme", "http"), (":authority", f"127.0.0.1:{port}"),
                                    ("content-type", "application/json"),
                                    ("content-length", str(len(payload)))])
            conn.send_data(sid, payload, end_stream=True)
            self.tails[sid] = b""
        self.sock.sendall(conn.data_to_send())
        self.open = streams


def read_http2(port: int, fmt: str, streams: int, tokens: int) -> dict:
    """The streams on as few HTTP/2 connections as the servers' limit allows."""
    import h2.events

    sel = selectors.DefaultSelector()
    end_mark = ENDS[fmt]
    sent = time.time()
    left = streams
    while left:
        n = min(left, STREAMS_PER_CONNECTION)
        c = H2Connection(port, fmt, n, tokens)
        sel.register(c.sock, selectors.EVENT_READ, c)
        left -= n
    first: dict[tuple, float] = {}
    ended: dict[tuple, float] = {}
    total = 0
    busy = len(sel.get_map())
    while busy:
        for key, _ in sel.select(timeout=60):
            c = key.data
            data = c.sock.recv(1 << 20)
            now = time.time()
            if not data:
                raise ConnectionError("the server closed an HTTP/2 connection")
            for event in c.conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    sid = (id(c), event.stream_id)
                    first.setdefault(sid, now)
                    total += len(event.data)
                    seen = c.tails[event.stream_id] + event.data
                    if end_mark in seen:
                        ended[sid] = now
                    c.tails[event.stream_id] = seen[-64:]
                    c.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    c.open -= 1
            c.sock.sendall(c.conn.data_to_send())
            if not c.open:
                sel.unregister(c.sock)
                c.sock.close()
                busy -= 1
    return {"sent": sent, "first": list(first.values()), "ended": list(ended.values()),
            "bytes": total, "complete": len(ended)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--format", choices=sorted(PATHS), default="own")
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--http2", action="store_true")
    args = p.parse_args(argv)
    read = read_http2 if args.http2 else read_http1
    seen = read(args.port, args.format, args.streams, args.tokens)
    used = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({**seen, "cpu_s": used.ru_utime + used.ru_stime}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
