"""An HTTP/2 client over a plain socket, driven by the test: requests open streams,
frames are read only when the test asks, a stream is left with RST_STREAM
(`reset`) or the whole connection dropped (`drop`), and a stream posted with
`stall` gets no flow-control credit (the connection's window is still given
back, so that its siblings flow)."""
from __future__ import annotations

import json
import socket

import h2.config
import h2.connection
import h2.errors
import h2.events

from live.client.sse_parser import SSEEvent, SSEParser


class H2Client:
    def __init__(self, base_url: str):
        self.authority = base_url.removeprefix("http://")
        host, port = self.authority.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self._flush()
        self.status: dict[int, int] = {}
        self.body: dict[int, bytes] = {}
        self.events: dict[int, list[SSEEvent]] = {}
        self.ended: set[int] = set()
        self.reset_by_server: set[int] = set()
        self.stalled: set[int] = set()
        self._parsers: dict[int, SSEParser] = {}

    def post(self, path: str, body: dict, stall: bool = False) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        payload = json.dumps(body).encode()
        self.conn.send_headers(stream_id, [
            (":method", "POST"), (":path", path), (":scheme", "http"),
            (":authority", self.authority), ("content-type", "application/json"),
            ("content-length", str(len(payload)))])
        self.conn.send_data(stream_id, payload, end_stream=True)
        self._flush()
        self.body[stream_id], self.events[stream_id] = b"", []
        self._parsers[stream_id] = SSEParser()
        if stall:
            self.stalled.add(stream_id)
        return stream_id

    def read_events(self, stream_id: int, count: int) -> list[SSEEvent]:
        """Read until the stream has `count` events (or has ended)."""
        while len(self.events[stream_id]) < count and stream_id not in self.ended:
            self._receive()
        return self.events[stream_id]

    def read_to_end(self, stream_id: int) -> bytes:
        while stream_id not in self.ended:
            self._receive()
        return self.body[stream_id]

    def event_names(self, stream_id: int) -> list[str]:
        return [e.event for e in self.events[stream_id]]

    def reset(self, stream_id: int) -> None:
        self.conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        self._flush()

    def drop(self) -> None:
        self.sock.close()

    def _receive(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                self.status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                if event.stream_id in self.stalled:
                    self.conn.increment_flow_control_window(event.flow_controlled_length)
                else:
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
                self.body[event.stream_id] += event.data
                self.events[event.stream_id] += [
                    item for item in self._parsers[event.stream_id].feed(event.data)
                    if isinstance(item, SSEEvent)]
            elif isinstance(event, h2.events.StreamEnded):
                self.ended.add(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.ended.add(event.stream_id)
                self.reset_by_server.add(event.stream_id)
        self._flush()

    def _flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())
