"""Random and hostile input to every endpoint of one real server: request bodies of
the right shape with fields of the wrong type or out of every range, JSON nested
deep, bytes that are no JSON, odd headers, keys and query strings. Every answer is a 4xx
with a JSON error in the endpoint's envelope, or a well-formed 200 (JSON, or an
event stream that ends with its format's last event); never a 5xx. The server is
alive after, and its pool whole.

`FUZZ_EXAMPLES=3000 pytest tests/server/test_server_fuzz.py` runs a longer search."""
import json
import os
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from live.client.sse_parser import SSEEvent, SSEParser
from live_server import TOY_NAME, running_server, tiny_app, wait_idle
from scheduler.settings import ServeSettings
from wire_apis import anthropic_error, openai_error, own_error

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000"))

# -- values ----------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-5, 40), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**400, 1e19, 1e-300, 1e308,
                     0.5, 1.5, -0.0]))
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
CONTENT = st.one_of(st.text(max_size=40), VALUES,
                    st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]),
                                                    "text": st.one_of(st.text(max_size=20),
                                                                      VALUES)}), max_size=3))
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "developer"]), VALUES),
     "content": CONTENT})
FIELD_VALUES = {
    "prompt": st.one_of(st.text(max_size=40), st.lists(st.integers(-2, 200), max_size=8), VALUES),
    "prompt_tokens": st.one_of(st.lists(st.integers(-2, 200), max_size=8), VALUES),
    "messages": st.one_of(st.lists(MESSAGE, max_size=3), VALUES),
    "system": CONTENT,
    "stop": st.one_of(st.text(max_size=5), st.lists(st.text(max_size=5), max_size=20), VALUES),
    "stop_sequences": st.one_of(st.lists(st.text(max_size=5), max_size=20), VALUES),
    "stream": st.one_of(st.booleans(), VALUES),
    "stream_options": st.one_of(
        st.fixed_dictionaries({}, optional={"include_usage": st.booleans(),
                                            "continuous_usage_stats": st.booleans()}), VALUES),
    "model": st.one_of(st.sampled_from([TOY_NAME, "default", "gpt-17"]), VALUES),
}
SCALARS = ["max_new_tokens", "max_tokens", "max_completion_tokens", "temperature", "top_p",
           "top_k", "seed", "ignore_eos", "n", "echo", "logprobs", "frobnicate"]
FIELDS = sorted([*FIELD_VALUES, *SCALARS])

VALID = {
    "/v1/stream": {"prompt": "hi", "max_new_tokens": 3},
    "/v1/completions": {"model": TOY_NAME, "prompt": "hi", "max_tokens": 3},
    "/v1/chat/completions": {"model": TOY_NAME, "max_tokens": 3,
                             "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages": {"model": TOY_NAME, "max_tokens": 3,
                     "messages": [{"role": "user", "content": "hi"}]},
}


@st.composite
def bodies(draw, path: str) -> bytes:
    kind = draw(st.sampled_from(["shaped"] * 6 + ["value", "bytes", "deep", "empty"]))
    if kind == "shaped":
        body = dict(VALID[path])
        for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
            body[name] = draw(FIELD_VALUES.get(name, VALUES))
        for name in draw(st.lists(st.sampled_from(sorted(body)), max_size=1)):
            del body[name]
        return json.dumps(body).encode()
    if kind == "value":
        return json.dumps(draw(VALUES)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "deep":
        opening = draw(st.sampled_from([b"[", b'{"a":', b'{"messages":[']))
        return opening * draw(st.sampled_from([10, 900, 5000, 100_000]))
    return b""


HEADER_TEXT = st.text(st.characters(codec="latin-1", categories=["L", "N", "P", "S"]),
                      max_size=80).map(lambda s: s.encode("latin-1"))


CLIENT_KEY, ADMIN_KEY = "fuzz-client", "fuzz-admin"
KEY_HEADERS = st.one_of(
    st.just([(b"authorization", b"Bearer " + CLIENT_KEY.encode())]),
    st.just([(b"x-api-key", CLIENT_KEY.encode())]),
    st.just([(b"authorization", b"Bearer " + ADMIN_KEY.encode())]),
    st.lists(st.tuples(st.sampled_from([b"authorization", b"x-api-key"]), HEADER_TEXT),
             max_size=2))


@st.composite
def headers(draw) -> list[tuple[bytes, bytes]]:
    """Odd headers, and a key: the client's mostly (so that bodies are read), else
    the admin's, none, or anything."""
    mostly_client = st.integers(0, 5).flatmap(
        lambda n: KEY_HEADERS if n == 0 else st.just([(b"x-api-key", CLIENT_KEY.encode())]))
    out = list(draw(mostly_client))
    for name in draw(st.lists(st.sampled_from([b"x-request-id", b"last-event-id",
                                               b"content-type"]), max_size=3, unique=True)):
        value = draw(st.one_of(HEADER_TEXT, st.sampled_from([b"application/json", b"text/plain",
                                                             b"x:1", b"a" * 64])))
        out.append((name, value))
    return out


QUERY_TEXT = st.one_of(st.text(max_size=12), st.integers().map(str),
                       st.sampled_from(["\u00b2", "\u0663", "-1", "1e3", " 1", "0", "10000"]))


@st.composite
def requests(draw):
    """(method, path, body, headers, envelope) of one request; a path to follow a
    stream is an int (the index of a stream this test started) or a random id's,
    quoted as a client quotes it (httpx refuses control characters in a URL)."""
    route = draw(st.sampled_from(["generate"] * 4 + ["follow", "model", "ops", "paging"]))
    if route == "generate":
        path = draw(st.sampled_from(sorted(VALID)))
        envelope = {"/v1/stream": own_error, "/v1/messages": anthropic_error}.get(path,
                                                                                 openai_error)
        return "POST", path, draw(bodies(path)), draw(headers()), envelope
    if route == "follow":
        stream = draw(st.one_of(st.integers(0, 1000), st.text(max_size=20).map(
            lambda name: f"/v1/stream/{quote(name, safe='')}")))
        return "GET", stream, None, draw(headers()), own_error
    if route == "model":
        name = draw(st.one_of(st.sampled_from([TOY_NAME, "default"]), st.text(max_size=20)))
        return "GET", f"/v1/models/{quote(name, safe='')}", None, draw(headers()), openai_error
    if route == "ops":
        path = draw(st.sampled_from(["/v1/models", "/health", "/stats", "/metrics",
                                     "/v1/engine"]))
        return ("GET", path, None, draw(headers()),
                openai_error if path == "/v1/models" else own_error)
    path = draw(st.sampled_from(["/v1/steps", "/v1/requests"]))
    query = "&".join(f"{name}={quote(draw(QUERY_TEXT), safe='')}"
                     for name in draw(st.lists(st.sampled_from(["after", "limit", "x"]),
                                               max_size=2, unique=True)))
    return "GET", f"{path}?{query}", None, draw(headers()), own_error


# -- answers ---------------------------------------------------------------------

LAST_EVENT = {"/v1/stream": ("done",), "/v1/messages": ("message_stop", "error")}


def _events(body: bytes) -> list[SSEEvent]:
    return [item for item in SSEParser().feed(body) if isinstance(item, SSEEvent)]


def check_answer(method: str, path: str, r: httpx.Response, envelope) -> None:
    assert r.status_code < 500, (method, path, r.status_code, r.text[:300])
    kind = r.headers.get("content-type", "")
    if r.status_code >= 400:
        assert kind == "application/json", (path, r.status_code, kind, r.text[:300])
        assert envelope(r.json())["message"]
        return
    if r.status_code == 204:
        assert path.startswith("/v1/stream/") and not r.content
        return
    assert r.status_code == 200
    if kind.startswith("text/event-stream"):
        events = _events(r.content)
        route = "/v1/stream" if path.startswith("/v1/stream") else path
        if route in LAST_EVENT:
            assert events and events[-1].event in LAST_EVENT[route], (path, r.text[-300:])
        else:
            assert events and events[-1].data == "[DONE]", (path, r.text[-300:])
    elif kind == "application/json":
        r.json()
    elif kind.startswith("application/x-ndjson"):
        for line in r.text.splitlines():
            json.loads(line)
    else:
        assert path == "/metrics" and kind.startswith("text/plain"), (path, kind)


@pytest.fixture(scope="module")
def server():
    app, engine = tiny_app(ServeSettings(default_max_tokens=4, max_body_bytes=1 << 16,
                                         body_timeout_s=10.0, api_key=(CLIENT_KEY,),
                                         admin_key=ADMIN_KEY, max_streams_per_key=4),
                           max_streams_per_key=4)
    with running_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield url, client, []
        assert client.get("/health").json()["status"] == "ok"
        after = wait_idle(url, {"x-api-key": ADMIN_KEY})
        assert after["blocks_reserved"] == 0 and after["admissions"] == after["releases"]
    assert engine.core.is_drained()


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_input_gets_a_5xx_or_breaks_the_server(server, data):
    url, client, stream_ids = server
    method, path, body, head, envelope = data.draw(requests())
    if not isinstance(path, str):
        stream = stream_ids[path % len(stream_ids)] if stream_ids else "none"
        path = f"/v1/stream/{quote(stream, safe='')}"
    r = client.request(method, path, content=body, headers=head)
    check_answer(method, path, r, envelope)
    if method == "POST" and r.status_code == 200 and "x-request-id" in r.headers:
        stream_ids.append(r.headers["x-request-id"])
