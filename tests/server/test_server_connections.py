"""A client cannot hold the server by sending slowly or by opening connections
without end: a body that does not come in time is a 408 in the API's envelope, a
request head that does not come in time closes its connection, and connections
beyond the limit are answered 503 and closed."""
import json
import socket

import httpx
import pytest

from live_server import RawStream, held_app, running_server, tiny_app, wait_idle
from scheduler.settings import ServeSettings
from wire_apis import APIS, IDS


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _pool_whole(url: str) -> None:
    after = wait_idle(url)
    assert after["blocks_reserved"] == 0 and after["admissions"] == after["releases"]
    assert httpx.get(url + "/health").status_code == 200


@pytest.fixture(scope="module")
def server():
    app, engine = tiny_app(ServeSettings(body_timeout_s=0.5, header_timeout_s=0.5))
    with running_server(app) as url:
        yield url
    assert engine.core.is_drained()


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closes(server, api):
    body = json.dumps(api.valid()).encode()
    sock = _connect(server)
    sock.sendall(f"POST {api.path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:len(body) // 2])
    head, _, content = _read_all(sock).partition(b"\r\n\r\n")
    sock.close()
    lines = head.decode().lower().split("\r\n")
    assert lines[0].startswith("http/1.1 408")
    assert "content-type: application/json" in lines and "connection: close" in lines
    error = api.error(json.loads(content))
    assert "did not arrive" in error["message"]
    _pool_whole(server)


def test_a_request_head_that_does_not_arrive_in_time_closes_the_connection(server):
    sock = _connect(server)
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nHost: test\r\n")
    assert _read_all(sock) == b""  # closed by the server, with nothing to say
    sock.close()
    idle = _connect(server)  # a connection that never sends a byte
    assert _read_all(idle) == b""
    idle.close()
    _pool_whole(server)


def test_connections_beyond_the_limit_are_answered_503_and_closed():
    app, engine, runner = held_app(ServeSettings(max_connections=2))
    with running_server(app) as url:
        runner.hold()  # from the start: a fast step loop would finish both streams first
        streams = [RawStream(url, "/v1/stream", {"prompt": "holds", "max_new_tokens": 6})
                   for _ in range(2)]
        for stream in streams:
            stream.read_events(1)  # the start, sent before any step
        runner.hold_and_wait()
        with httpx.Client() as client:
            r = client.get(url + "/health")
            chat = client.post(url + "/v1/chat/completions", json={})
        assert r.status_code == 503 and r.headers["connection"] == "close"
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "unavailable"
        assert "2 connections" in r.json()["error"]["message"]
        # in the envelope of the API asked
        assert chat.status_code == 503 and chat.json()["error"]["code"] == "unavailable"
        runner.release()
        for stream in streams:
            assert json.loads(stream.read_to_end()[-1].data)["finish_reason"] == "length"
            stream.close()
        _pool_whole(url)
    assert engine.core.is_drained()
