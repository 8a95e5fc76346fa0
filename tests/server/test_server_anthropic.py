"""Anthropic-compatible messages on the wire (httpx, tiny model): the event
sequence, the engine's own text, stop reasons, pings, and the non-streaming body."""
import json

import httpx

from scheduler.settings import ServeSettings
from live.client.sse_parser import SSEParser
from live_server import (TOY_NAME, RawStream, ToyTokenizer, engine_alone, held_app,
                         running_server, tiny_app, wait_idle)

TOK = ToyTokenizer()
SYSTEM = "be brief"
MESSAGES = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": [{"type": "text", "text": "and again"}]}]


def prompt_ids():
    turns = [{"role": "system", "content": SYSTEM}, *MESSAGES[:2],
             {"role": "user", "content": "and again"}]
    return TOK.apply_chat_template(turns, add_generation_prompt=True)


def test_a_message_stream_has_the_anthropic_event_sequence():
    tokens, text, _ = engine_alone(prompt_ids(), 6)
    app, engine = tiny_app()
    with running_server(app) as url:
        body = {"model": TOY_NAME, "system": SYSTEM, "messages": MESSAGES, "max_tokens": 6,
                "temperature": 0, "stream": True}
        with httpx.stream("POST", url + "/v1/messages", json=body, timeout=30) as r:
            assert r.status_code == 200
            rid = r.headers["x-request-id"]
            events = SSEParser().feed(r.read())
        wait_idle(url)
    names = [e.event for e in events]
    assert names == (["message_start", "content_block_start"] + ["content_block_delta"] * 6
                     + ["content_block_stop", "message_delta", "message_stop"])
    data = [json.loads(e.data) for e in events]
    assert all(d["type"] == e.event for d, e in zip(data, events))
    message = data[0]["message"]
    assert message["id"] == f"msg_{rid}" and message["model"] == TOY_NAME
    assert message["usage"] == {"input_tokens": len(prompt_ids()), "output_tokens": 0}
    assert data[1]["content_block"] == {"type": "text", "text": ""}
    assert "".join(d["delta"]["text"] for d in data[2:8]) == text
    assert data[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert data[-2]["usage"] == {"output_tokens": 6}
    assert engine.core.is_drained()


def test_stop_reasons_and_the_non_streaming_body():
    tokens, text, _ = engine_alone(prompt_ids(), 12)
    app, engine = tiny_app(eos=frozenset({tokens[5]}))
    body = {"system": [{"type": "text", "text": SYSTEM}], "messages": MESSAGES, "max_tokens": 12,
            "temperature": 0}
    with running_server(app) as url:
        r = httpx.post(url + "/v1/messages", json=body, timeout=30)
        answer = r.json()
        end = tokens.index(tokens[5]) + 1
        assert answer["type"] == "message" and answer["role"] == "assistant"
        assert answer["id"] == f"msg_{r.headers['x-request-id']}"
        assert answer["stop_reason"] == "end_turn" and answer["stop_sequence"] is None
        assert answer["usage"] == {"input_tokens": len(prompt_ids()), "output_tokens": end}
        stop = text[1:3]
        r = httpx.post(url + "/v1/messages", timeout=30,
                       json={**body, "ignore_eos": True, "stop_sequences": [stop]})
        answer = r.json()
        assert answer["stop_reason"] == "stop_sequence" and answer["stop_sequence"] == stop
        assert answer["content"] == [{"type": "text", "text": text[:text.index(stop)]}]
        r = httpx.post(url + "/v1/messages", json={**body, "ignore_eos": True}, timeout=30)
        assert r.json()["stop_reason"] == "max_tokens"
        assert r.json()["content"][0]["text"] == text
        wait_idle(url)
    assert engine.core.is_drained()


def test_pings_keep_a_waiting_message_stream_alive():
    app, engine, runner = held_app(ServeSettings(keepalive_s=0.05), max_batch=1)
    with running_server(app) as url:
        runner.hold()
        first = RawStream(url, "/v1/stream", {"prompt": "first", "max_new_tokens": 5})
        runner.blocked.wait(10)  # its prefill
        runner.allow(1)  # then its next step is held: it keeps the only slot
        first.read_events(2)
        waiting = RawStream(url, "/v1/messages", {"messages": MESSAGES, "max_tokens": 3,
                                                  "stream": True})
        waiting.read_events(3)
        assert [e.event for e in waiting.events] == ["message_start", "content_block_start",
                                                     "ping"]
        runner.release()
        assert waiting.read_to_end()[-1].event == "message_stop"
        first.read_to_end()
        first.close()
        waiting.close()
        wait_idle(url)
    assert engine.core.is_drained()
