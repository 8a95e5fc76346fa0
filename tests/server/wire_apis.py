"""The four generating APIs as tests drive them: a body each accepts, the name of
its length field, and the shape of its error envelope; and a refusal checked as
every refusal must be (its status, JSON in the API's envelope, nothing held after,
the server alive)."""
from dataclasses import dataclass
from typing import Callable

import httpx

from live_server import TOY_NAME, stats


@dataclass
class Api:
    name: str
    path: str
    valid: Callable[..., dict]
    """A body the server accepts; keyword arguments override its fields."""
    max_tokens: str
    error: Callable[[dict], dict]
    """The inner error object of an envelope, after checking the envelope's shape."""


def openai_error(body):
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def own_error(body):
    assert set(body) == {"error"}
    assert set(body["error"]) == {"type", "message", "param"}
    return body["error"]


def anthropic_error(body):
    assert body["type"] == "error" and set(body) == {"type", "error"}
    assert set(body["error"]) == {"type", "message"}
    return body["error"]


def body_of(base: dict, overrides: dict) -> dict:
    body = {**base, **overrides}
    return {k: v for k, v in body.items() if v is not DROP}


DROP = object()

APIS = [
    Api("stream", "/v1/stream",
        lambda **kw: body_of({"prompt": "hello", "max_new_tokens": 4}, kw), "max_new_tokens",
        own_error),
    Api("completions", "/v1/completions",
        lambda **kw: body_of({"model": TOY_NAME, "prompt": "hello", "max_tokens": 4}, kw),
        "max_tokens", openai_error),
    Api("chat", "/v1/chat/completions",
        lambda **kw: body_of({"model": TOY_NAME, "max_tokens": 4,
                              "messages": [{"role": "user", "content": "hello"}]}, kw),
        "max_tokens", openai_error),
    Api("messages", "/v1/messages",
        lambda **kw: body_of({"model": TOY_NAME, "max_tokens": 4,
                              "messages": [{"role": "user", "content": "hello"}]}, kw),
        "max_tokens", anthropic_error),
]
IDS = [api.name for api in APIS]


def refused(url: str, api: Api, status: int, *, json=None, content=None, headers=None):
    r = httpx.post(url + api.path, json=json, content=content, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = api.error(r.json())
    assert error["message"]
    after = stats(url)
    assert after["blocks_reserved"] == 0 and after["waiting"] == 0 and after["streams_open"] == 0
    assert httpx.get(url + "/health").status_code == 200
    return r, error


