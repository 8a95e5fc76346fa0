"""OpenAI-compatible completions and chat completions on the wire (httpx, tiny
model): chunk objects, one per token, the engine's own text, usage options,
`[DONE]`, and what a failure after the 200 looks like."""
import json

import httpx
import pytest

from live.client.sse_parser import SSEParser
from live_server import (TOY_NAME, ToyTokenizer, engine_alone, running_server, tiny_app,
                         wait_idle)

TOK = ToyTokenizer()
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]


def chat_ids(messages=MESSAGES):
    return TOK.apply_chat_template(messages, add_generation_prompt=True)


@pytest.fixture(scope="module")
def server():
    app, engine = tiny_app()
    with running_server(app) as url:
        yield url
    assert engine.core.is_drained()


def _stream(url, path, body):
    with httpx.stream("POST", url + path, json=body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache, no-transform"
        raw = r.read()
        rid = r.headers["x-request-id"]
    events = SSEParser().feed(raw)
    assert all(e.event == "message" for e in events)
    assert events[-1].data == "[DONE]"
    return rid, [json.loads(e.data) for e in events[:-1]]


def test_chat_stream_is_a_chunk_per_token_with_the_engines_text(server):
    tokens, text, _ = engine_alone(chat_ids(), 8)
    rid, chunks = _stream(server, "/v1/chat/completions",
                          {"model": TOY_NAME, "messages": MESSAGES, "max_tokens": 8,
                           "temperature": 0, "stream": True})
    assert {c["id"] for c in chunks} == {f"chatcmpl-{rid}"}
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {TOY_NAME}
    assert all("usage" not in c for c in chunks)
    first, *deltas, last = [c["choices"][0] for c in chunks]
    assert first["delta"] == {"role": "assistant", "content": ""}
    assert len(deltas) == len(tokens) == 8
    assert "".join(d["delta"]["content"] for d in deltas) == text
    assert all(d["finish_reason"] is None for d in deltas)
    assert last == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}


def test_include_usage_adds_a_last_chunk_and_nulls_elsewhere(server):
    _, chunks = _stream(server, "/v1/chat/completions",
                        {"messages": MESSAGES, "max_tokens": 5, "stream": True, "seed": 3,
                         "stream_options": {"include_usage": True}})
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": len(chat_ids()), "completion_tokens": 5,
                                   "total_tokens": len(chat_ids()) + 5}


def test_continuous_usage_stats_counts_on_every_chunk(server):
    _, chunks = _stream(server, "/v1/completions",
                        {"prompt": "count", "max_tokens": 4, "stream": True,
                         "stream_options": {"include_usage": True,
                                            "continuous_usage_stats": True}})
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == [1, 2, 3, 4, 4, 4]  # four tokens, the finish chunk, the usage chunk
    assert {c["usage"]["prompt_tokens"] for c in chunks} == {5}


def test_completion_stream_from_token_ids(server):
    prompt = TOK.encode("ids in, text out")
    tokens, text, _ = engine_alone(prompt, 6)
    rid, chunks = _stream(server, "/v1/completions",
                          {"model": "default", "prompt": prompt, "max_tokens": 6,
                           "temperature": 0, "stream": True})
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert {c["id"] for c in chunks} == {f"cmpl-{rid}"}
    choices = [c["choices"][0] for c in chunks]
    assert "".join(c["text"] for c in choices) == text
    assert [c["finish_reason"] for c in choices] == [None] * 6 + ["length"]


def test_non_streaming_answers_equal_the_engine(server):
    tokens, text, _ = engine_alone(chat_ids(), 7)
    r = httpx.post(server + "/v1/chat/completions",
                   json={"messages": MESSAGES, "max_completion_tokens": 7, "max_tokens": 99,
                         "temperature": 0}, timeout=30)
    body = r.json()
    assert r.headers["x-request-id"] and body["id"] == f"chatcmpl-{r.headers['x-request-id']}"
    assert body["object"] == "chat.completion"
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": text},
                                "logprobs": None, "finish_reason": "length"}]
    assert body["usage"] == {"prompt_tokens": len(chat_ids()), "completion_tokens": 7,
                             "total_tokens": len(chat_ids()) + 7}
    # content as a list of text parts is the same prompt
    parts = [{**m, "content": [{"type": "text", "text": m["content"][:2]},
                               {"type": "text", "text": m["content"][2:]}]} for m in MESSAGES]
    again = httpx.post(server + "/v1/chat/completions",
                       json={"messages": parts, "max_tokens": 7, "temperature": 0}, timeout=30)
    assert again.json()["choices"][0]["message"]["content"] == text
    prompt_text = "plain completion"
    _, plain, _ = engine_alone(TOK.encode(prompt_text), 16)
    r = httpx.post(server + "/v1/completions", json={"prompt": [prompt_text], "temperature": 0},
                   timeout=30)
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == plain  # 16 tokens: OpenAI's default max_tokens
    assert body["usage"]["completion_tokens"] == 16
    wait_idle(server)


def test_stop_and_eos_finish_with_stop():
    tokens, text, _ = engine_alone(chat_ids(), 12)
    app, engine = tiny_app(eos=frozenset({tokens[4]}))
    with running_server(app) as url:
        r = httpx.post(url + "/v1/chat/completions",
                       json={"messages": MESSAGES, "max_tokens": 12, "temperature": 0}, timeout=30)
        assert r.json()["choices"][0]["finish_reason"] == "stop"
        assert r.json()["usage"]["completion_tokens"] == tokens.index(tokens[4]) + 1
        r = httpx.post(url + "/v1/chat/completions",
                       json={"messages": MESSAGES, "max_tokens": 12, "temperature": 0,
                             "ignore_eos": True, "stop": [text[8:10]]}, timeout=30)
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["message"]["content"] == text[:text.index(text[8:10])]
        wait_idle(url)
    assert engine.core.is_drained()


class FailingRunner:
    """Raises on every run of its `fail_at`-th step, the engine's retries of it
    sequence by sequence included, as a model that breaks on that step's input."""

    def __init__(self, runner, fail_at: int):
        self.runner, self.fail_at, self.steps = runner, fail_at, 0
        self.eos_token_ids, self.vocab_size = runner.eos_token_ids, runner.vocab_size
        self._step_index = None

    def execute(self, plan):
        if plan.index != self._step_index:  # a retry runs under its step's index
            self._step_index = plan.index
            self.steps += 1
        if self.steps == self.fail_at:
            raise RuntimeError("the model broke (on purpose)")
        return self.runner.execute(plan)

    def forget(self, seq_id):
        self.runner.forget(seq_id)


def test_a_failure_after_the_200_is_an_error_event_in_every_format():
    failing = []
    app, engine = tiny_app(runner_wrapper=lambda r: failing.append(FailingRunner(r, 3))
                           or failing[0])
    with running_server(app) as url:
        body = {"messages": MESSAGES, "max_tokens": 20, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as r:
            assert r.status_code == 200
            events = SSEParser().feed(r.read())
        assert events[-1].data == "[DONE]"
        error = json.loads(events[-2].data)["error"]
        assert error["type"] == "server_error" and error["code"] == "engine_error"
        # the next request runs on a healthy step; make the next one fail too
        failing[0].steps, failing[0].fail_at = 0, 2
        with httpx.stream("POST", url + "/v1/stream", json={"prompt": "x", "max_new_tokens": 20},
                          timeout=30) as r:
            events = SSEParser().feed(r.read())
        assert [e.event for e in events[-2:]] == ["error", "done"]
        assert json.loads(events[-2].data)["error"]["type"] == "engine_error"
        assert json.loads(events[-1].data)["finish_reason"] == "error"
        failing[0].steps = 0
        with httpx.stream("POST", url + "/v1/messages", timeout=30,
                          json={**body, "messages": MESSAGES[1:], "system": "be brief"}) as r:
            events = SSEParser().feed(r.read())
        assert events[-1].event == "error"
        assert json.loads(events[-1].data)["error"]["type"] == "api_error"
        failing[0].steps = 0
        r = httpx.post(url + "/v1/chat/completions", json={**body, "stream": False}, timeout=30)
        assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
        assert wait_idle(url)["aborts"]["error"] == 4
    assert engine.core.is_drained()
