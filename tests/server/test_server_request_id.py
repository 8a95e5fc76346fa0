"""A client's own `X-Request-Id` names its stream in every wire format: the SSE
ids, the response header, the API's own ids and `GET /v1/stream/{id}` follow it.
A malformed id is a 400 and an id in use a 409, before the first byte and at no
cost to the engine."""
import httpx
import pytest

from live.client.sse_parser import SSEParser
from live_server import running_server, stats, tiny_app, wait_idle

STREAM = {"prompt": "hello there", "max_new_tokens": 4, "ignore_eos": True}
CHAT = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "stream": True}
MESSAGES = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 3, "stream": True}


def events(raw: bytes):
    return [e for e in SSEParser().feed(raw) if hasattr(e, "data")]


def test_the_clients_id_names_its_stream_and_its_resumption():
    app, _ = tiny_app()
    with running_server(app) as url:
        r = httpx.post(url + "/v1/stream", json=STREAM, headers={"X-Request-Id": "trace-7.a_b"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "trace-7.a_b"
        sent = events(r.content)
        assert [e.id for e in sent] == [f"trace-7.a_b:{n}" for n in range(len(sent))]
        assert [e.event for e in sent] == ["start", "token", "token", "token", "token", "done"]
        again = httpx.get(url + "/v1/stream/trace-7.a_b", headers={"Last-Event-ID": "trace-7.a_b:2"})
        assert again.status_code == 200
        assert [(e.id, e.data) for e in events(again.content)] == [(e.id, e.data) for e in sent[3:]]
        wait_idle(url)


def test_the_openai_and_anthropic_ids_carry_it():
    app, _ = tiny_app()
    with running_server(app) as url:
        chat = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "c1"})
        chunks = [e.data for e in events(chat.content) if e.data != "[DONE]"]
        assert chunks and all('"id":"chatcmpl-c1"' in c for c in chunks)
        message = httpx.post(url + "/v1/messages", json=MESSAGES, headers={"X-Request-Id": "m1"})
        assert '"id":"msg_m1"' in events(message.content)[0].data
        wait_idle(url)


@pytest.mark.parametrize("path, body, kind", [
    ("/v1/stream", STREAM, lambda b: b["error"]["type"]),
    ("/v1/chat/completions", CHAT, lambda b: b["error"]["code"]),
    ("/v1/messages", MESSAGES, lambda b: b["error"]["type"]),
])
def test_an_id_in_use_is_refused_with_409(path, body, kind):
    app, _ = tiny_app()
    with running_server(app) as url:
        assert httpx.post(url + path, json=body, headers={"X-Request-Id": "same"}).status_code == 200
        before = wait_idle(url)
        again = httpx.post(url + path, json=body, headers={"X-Request-Id": "same"})
        assert again.status_code == 409
        assert kind(again.json()) in ("request_id_in_use", "invalid_request_error")
        assert "choose another X-Request-Id" in again.text
        after = wait_idle(url)
        assert (after["admissions"], after["releases"]) == (before["admissions"], before["releases"])
        assert after["blocks_free"] == after["num_blocks"]


@pytest.mark.parametrize("bad", ["", "a:b", "a b", "x" * 65, "é".encode("latin-1")])
def test_a_malformed_id_is_refused_with_400(bad):
    app, _ = tiny_app()
    with running_server(app) as url:
        r = httpx.post(url + "/v1/stream", json=STREAM, headers={"X-Request-Id": bad})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "X-Request-Id"
        assert stats(url)["admissions"] == 0
