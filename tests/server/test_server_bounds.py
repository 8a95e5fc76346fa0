"""Every field is bounded before admission: a value the engine cannot take is a
400 in the API's envelope (or, for a top_k beyond the vocabulary, means no cut),
never a 500 and never a failed step that ends other streams; and bodies or query
strings that break a parser are 400s too."""
import json
import socket

import httpx
import pytest

from live_server import (TOY_NAME, RawStream, held_app, running_server, stats, tiny_app,
                         wait_idle)
from scheduler.settings import ServeSettings
from tiny_models import VOCAB
from wire_apis import APIS, IDS, own_error, refused

STOP_FIELD = {"stream": "stop", "completions": "stop", "chat": "stop",
              "messages": "stop_sequences"}


@pytest.fixture(scope="module")
def server():
    app, engine = tiny_app(ServeSettings(max_stop_strings=4, max_stop_chars=8))
    with running_server(app) as url:
        yield url
    assert engine.core.is_drained()


def _pool_whole(url: str) -> None:
    after = wait_idle(url)
    assert after["blocks_reserved"] == 0 and after["admissions"] == after["releases"]


def _tokens(url: str, **sampling) -> list[int]:
    body = {"prompt": "hello", "max_new_tokens": 6, "temperature": 1.0, "seed": 5, **sampling}
    stream = RawStream(url, "/v1/stream", body)
    events = stream.read_to_end()
    stream.close()
    assert events[-1].event == "done", events[-1]
    return [json.loads(e.data)["token_id"] for e in events if e.event == "token"]


def test_a_top_k_beyond_the_vocabulary_cuts_nothing_and_harms_no_other_stream():
    app, engine, runner = held_app()
    with running_server(app) as url:
        # held from the start: a fast step loop would finish the other stream
        # before a hold taken after its first token
        runner.hold()
        other = RawStream(url, "/v1/stream", {"prompt": "others", "max_new_tokens": 8})
        runner.blocked.wait(10)  # its prefill
        runner.allow(1)  # then its next step is held, with tokens still to make
        other.read_events(2)
        huge = RawStream(url, "/v1/chat/completions",
                         {"model": TOY_NAME, "max_tokens": 4, "stream": True, "top_k": 1e19,
                          "messages": [{"role": "user", "content": "hi"}]})
        assert huge.read_head() == 200
        runner.release()  # the huge top_k decodes in the same steps as the other stream
        chunks = [json.loads(e.data) for e in huge.read_to_end() if e.data != "[DONE]"]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert json.loads(other.read_to_end()[-1].data)["finish_reason"] == "length"
        huge.close()
        other.close()
        no_cut = _tokens(url)
        for top_k in (VOCAB, VOCAB + 1, 10**30, 1e19):
            assert _tokens(url, top_k=top_k) == no_cut
        _pool_whole(url)
    assert engine.core.is_drained()


OUT_OF_BOUNDS = [{"top_p": 10**400}, {"top_p": 1e-400}, {"temperature": 10**400},
                 {"temperature": -1e-9}, {"seed": 1 << 64}, {"seed": -(1 << 63) - 1},
                 {"top_k": -2}, {"top_k": 2.5}]


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_sampling_values_out_of_bounds_are_400_naming_the_field(server, api):
    for override in OUT_OF_BOUNDS:
        _, error = refused(server, api, 400, json=api.valid(**override))
        assert next(iter(override)) in error["message"], override
    for literal in ("NaN", "Infinity", "-Infinity"):
        body = json.dumps(api.valid()).replace('"max_tokens"', f'"temperature": {literal}, '
                                                                  '"max_tokens"')
        body = body.replace('"max_new_tokens"', f'"top_p": {literal}, "max_new_tokens"')
        refused(server, api, 400, content=body.encode())


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_length_beyond_any_context_is_422(server, api):
    refused(server, api, 422, json=api.valid(**{api.max_tokens: 10**400}))


def test_a_temperature_too_small_to_sample_with_is_greedy(server):
    assert _tokens(server, temperature=1e-300) == _tokens(server, temperature=0)
    _pool_whole(server)


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_stop_strings_beyond_the_count_or_length_limit_are_400(server, api):
    name = STOP_FIELD[api.name]
    _, error = refused(server, api, 400, json=api.valid(**{name: ["a", "b", "c", "d", "e"]}))
    assert "4" in error["message"]
    _, error = refused(server, api, 400, json=api.valid(**{name: ["x" * 9]}))
    assert "8" in error["message"]
    ok = httpx.post(server + api.path, json=api.valid(**{name: ["a", "b", "c", "d" * 8]}),
                    timeout=30)
    assert ok.status_code == 200
    _pool_whole(server)


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_bodies_that_break_a_json_parser_are_400(server, api):
    for content in (b"[" * 100_000, b'{"a":' * 100_000, b'{"max_tokens": 1' + b"0" * 5000 + b"}"):
        _, error = refused(server, api, 400, content=content)
        assert "JSON" in error["message"]


@pytest.mark.parametrize("api", [a for a in APIS if a.name in ("chat", "messages")],
                         ids=["chat", "messages"])
def test_a_role_of_the_wrong_type_is_400(server, api):
    for role in (["user"], {"user": 1}, 3):
        _, error = refused(server, api, 400,
                           json=api.valid(messages=[{"role": role, "content": "x"}]))
        assert "role" in error["message"]


@pytest.mark.parametrize("path", ["/v1/steps", "/v1/requests"])
def test_paging_numbers_that_are_not_ascii_digits_are_400(server, path):
    for query in ("after=%C2%B2", "limit=%D9%A3", "after=-1", "after=1e3", "limit=0",
                  "after=" + "9" * 5000):
        r = httpx.get(f"{server}{path}?{query}")
        assert r.status_code == 400, (query, r.text)
        assert r.headers["content-type"] == "application/json"
        assert own_error(r.json())["param"] in ("after", "limit")
    assert stats(server)["streams_open"] == 0


def test_a_content_length_of_more_digits_than_python_reads_is_refused(server):
    sock = socket.create_connection(tuple(server.removeprefix("http://").split(":")), timeout=30)
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nHost: test\r\nContent-Length: "
                 + b"9" * 5000 + b"\r\n\r\n{}")
    answer = b""
    while chunk := sock.recv(65536):
        answer += chunk
    sock.close()
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:300]
    assert httpx.get(server + "/health").status_code == 200
