"""The project's own stream over a real uvicorn: events on the wire, their ids and
order, the engine's own tokens, keep-alives, Last-Event-ID resumption, several
readers and the resume grace."""
import asyncio
import json

import httpx
import pytest

from live.runner.params import SamplingParams
from scheduler.settings import ServeSettings
from live.client.sse_parser import SSEParser
from live_server import (HeldRunner, RawStream, ToyTokenizer, engine_alone, held_app,
                         running_server, stats, tiny_app, wait_for, wait_idle)

TOK = ToyTokenizer()


def parse(body: bytes):
    return SSEParser().feed(body)


async def _post_all(base_url: str, bodies: list[dict]):
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        async def one(body):
            async with client.stream("POST", "/v1/stream", json=body) as r:
                return r.status_code, r.headers, await r.aread()
        return await asyncio.gather(*(one(b) for b in bodies))


def test_forty_streams_carry_the_engines_own_tokens_in_order():
    app, engine = tiny_app(max_batch=8)
    bodies = [{"prompt": f"stream {i} says:", "max_new_tokens": 3 + i % 7} for i in range(40)]
    with running_server(app) as url:
        answers = asyncio.run(_post_all(url, bodies))
        after = wait_idle(url)
    for body, (status, headers, raw) in zip(bodies, answers):
        assert status == 200
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["cache-control"] == "no-cache, no-transform"
        assert headers["x-accel-buffering"] == "no"
        events = parse(raw)
        rid = headers["x-request-id"]
        n = body["max_new_tokens"]
        assert [e.event for e in events] == ["start"] + ["token"] * n + ["done"]
        assert [e.id for e in events] == [f"{rid}:{seq}" for seq in range(n + 2)]
        data = [json.loads(e.data) for e in events]
        assert data[0] == {"id": rid, "prompt_tokens": len(body["prompt"])}
        tokens, text, _ = engine_alone(TOK.encode(body["prompt"]), n)
        assert [d["token_id"] for d in data[1:-1]] == tokens
        assert [d["index"] for d in data[1:-1]] == list(range(n))
        assert "".join(d["text"] for d in data[1:-1]) == text
        done = data[-1]
        assert done["finish_reason"] == "length"
        assert done["usage"] == {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
        timing = done["timing"]
        assert timing["arrival"] <= timing["admitted"] <= timing["first_token"] <= timing["finished"]
    assert after["finished"] == {"length": 40}
    assert engine.core.is_drained()


def _events(url: str, body: dict | None, headers: dict | None = None, path: str = "/v1/stream"):
    method = "POST" if body is not None else "GET"
    with httpx.stream(method, url + path, json=body, headers=headers, timeout=30) as r:
        raw = r.read()
        if r.status_code != 200:
            return r, raw, []
        return r, raw, [(e.event, e.id, json.loads(e.data)) for e in parse(raw)]


def test_prompt_tokens_stop_strings_and_the_held_back_tail():
    app, engine = tiny_app()
    prompt = TOK.encode("the same prompt")
    tokens, text, _ = engine_alone(prompt, 12)
    stop = text[5:7]
    cut = text.index(stop)
    # a stop string whose first character comes but whose rest never does: held
    # back until the end, then given in done's text
    never = text[-1] + "\x7f\x7f\x7f"
    with running_server(app) as url:
        _, _, events = _events(url, {"prompt_tokens": prompt, "max_new_tokens": 12, "stop": stop})
        assert events[-1][2]["finish_reason"] == "stop"
        assert "".join(d.get("text", "") for _, _, d in events[1:]) == text[:cut]
        _, _, events = _events(url, {"prompt_tokens": prompt, "max_new_tokens": 12, "stop": [never]})
        done = events[-1][2]
        assert done["finish_reason"] == "length"
        assert done["text"].startswith(text[-1])
        assert "".join(d["text"] for e, _, d in events if e == "token") + done["text"] == text
        wait_idle(url)
    assert engine.core.is_drained()


def test_eos_ends_a_stream_unless_ignore_eos():
    prompt = TOK.encode("an eos test")
    tokens, _, _ = engine_alone(prompt, 10)
    eos = tokens[3]
    first = tokens.index(eos)
    app, engine = tiny_app(eos=frozenset({eos}))
    with running_server(app) as url:
        _, _, events = _events(url, {"prompt": "an eos test", "max_new_tokens": 10})
        assert events[-1][2]["finish_reason"] == "eos"
        assert [d["token_id"] for e, _, d in events if e == "token"] == tokens[:first + 1]
        _, _, events = _events(url, {"prompt": "an eos test", "max_new_tokens": 10,
                                     "ignore_eos": True})
        assert events[-1][2]["finish_reason"] == "length"
        assert [d["token_id"] for e, _, d in events if e == "token"] == tokens
        wait_idle(url)
    assert engine.core.is_drained()


def test_a_seeded_sampled_stream_equals_the_engine_alone():
    params = dict(temperature=0.9, top_p=0.95, top_k=40, seed=1234)
    tokens, _, _ = engine_alone(TOK.encode("sampled"), 10, SamplingParams(**params))
    app, _ = tiny_app()
    with running_server(app) as url:
        _, _, events = _events(url, {"prompt": "sampled", "max_new_tokens": 10, **params})
    assert [d["token_id"] for e, _, d in events if e == "token"] == tokens


def test_keepalive_comments_reach_a_stream_waiting_for_a_slot():
    app, engine, runner = held_app(ServeSettings(keepalive_s=0.05), max_batch=1)
    with running_server(app) as url:
        runner.hold()
        first = RawStream(url, "/v1/stream", {"prompt": "first", "max_new_tokens": 5})
        runner.blocked.wait(10)  # its prefill
        runner.allow(1)  # then its next step is held: it keeps the only slot
        first.read_events(2)  # start and one token
        second = RawStream(url, "/v1/stream", {"prompt": "second", "max_new_tokens": 3})
        assert second.read_head() == 200
        second.read_until_comment("keep-alive")
        assert [e.event for e in second.events] == ["start"]
        runner.release()
        assert [e.event for e in second.read_to_end()][-1] == "done"
        first.read_to_end()
        first.close()
        second.close()
        wait_idle(url)
    assert engine.core.is_drained()


def test_last_event_id_replays_exactly_the_missing_events():
    app, _ = tiny_app(ServeSettings(replay_events=64))
    with running_server(app) as url:
        r, _, events = _events(url, {"prompt": "replay me", "max_new_tokens": 8})
        rid = r.headers["x-request-id"]
        # the whole stream again, and from the middle
        _, _, again = _events(url, None, path=f"/v1/stream/{rid}")
        assert again == events
        _, _, rest = _events(url, None, {"Last-Event-ID": f"{rid}:4"}, path=f"/v1/stream/{rid}")
        assert rest == events[5:]
        _, _, last = _events(url, None, {"Last-Event-ID": f"{rid}:{len(events) - 2}"},
                             path=f"/v1/stream/{rid}")
        assert last == events[-1:]
        # after the last event there is nothing more: 204 stops an EventSource
        r, raw, _ = _events(url, None, {"Last-Event-ID": f"{rid}:{len(events) - 1}"},
                            path=f"/v1/stream/{rid}")
        assert r.status_code == 204 and raw == b""


def test_resumption_errors_are_clear():
    app, _ = tiny_app(ServeSettings(replay_events=3))
    with running_server(app) as url:
        r, _, events = _events(url, {"prompt": "short buffer", "max_new_tokens": 10})
        rid = r.headers["x-request-id"]
        r, raw, _ = _events(url, None, path="/v1/stream/0123456789abcdef")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
        r, raw, _ = _events(url, None, {"Last-Event-ID": f"{rid}:1"}, path=f"/v1/stream/{rid}")
        assert r.status_code == 410 and r.json()["error"]["type"] == "gone"
        assert r.json()["error"]["param"] == "Last-Event-ID"
        r, raw, _ = _events(url, None, {"Last-Event-ID": "someone-else:3"}, path=f"/v1/stream/{rid}")
        assert r.status_code == 400
        r, raw, _ = _events(url, None, {"Last-Event-ID": f"{rid}:99"}, path=f"/v1/stream/{rid}")
        assert r.status_code == 400
        # the buffer still holds the last three events
        _, _, tail = _events(url, None, {"Last-Event-ID": f"{rid}:{len(events) - 4}"},
                             path=f"/v1/stream/{rid}")
        assert tail == events[-3:]


def test_a_second_reader_keeps_the_stream_when_the_first_leaves():
    app, engine, runner = held_app()
    prompt = "two readers"
    tokens, _, _ = engine_alone(TOK.encode(prompt), 20)
    with running_server(app) as url:
        runner.hold()
        first = RawStream(url, "/v1/stream", {"prompt": prompt, "max_new_tokens": 20})
        first.read_events(1)
        rid = first.headers["x-request-id"]
        second = RawStream(url, f"/v1/stream/{rid}", method="GET",
                           headers={"Last-Event-ID": f"{rid}:0"})
        assert second.read_head() == 200
        assert stats(url)["readers"] == 2
        first.reset()  # the first reader leaves while nothing is made; the second still reads
        wait_for(lambda: stats(url)["readers"] == 1, what="the first reader to be gone")
        runner.release()
        events = second.read_to_end()
        second.close()
        assert [e.event for e in events][-1] == "done"
        assert json.loads(events[-1].data)["finish_reason"] == "length"
        assert [json.loads(e.data)["token_id"] for e in events if e.event == "token"] == tokens
        assert stats(url)["tokens_after_leave"] == 0
        wait_idle(url)
    assert engine.core.is_drained()


def _leave_between_steps(url: str, runner: HeldRunner, client: RawStream) -> None:
    """Reset the connection while a step waits to run, and let the hub notice."""
    runner.hold_and_wait()
    client.reset()
    wait_for(lambda: stats(url)["streams_in_grace"] == 1, what="the stream to wait for its client")
    runner.release()


def test_resume_grace_keeps_a_left_stream_paused_and_a_get_resumes_it():
    app, engine, runner = held_app(ServeSettings(resume_grace_s=60))
    prompt = "come back later"
    tokens, _, _ = engine_alone(TOK.encode(prompt), 30)
    with running_server(app) as url:
        client = RawStream(url, "/v1/stream", {"prompt": prompt, "max_new_tokens": 30})
        seen = client.read_events(4)  # start and three tokens
        rid = client.headers["x-request-id"]
        _leave_between_steps(url, runner, client)
        paused = wait_for(lambda: (s := stats(url))["paused"] == 1 and s, what="the pause")
        assert paused["blocks_reserved"] > 0 and paused["streams_open"] == 1
        # only the step already under way when the client left made a token for nobody
        assert paused["tokens_after_leave"] == 1
        back = RawStream(url, f"/v1/stream/{rid}", method="GET",
                         headers={"Last-Event-ID": seen[-1].id})
        rest = back.read_to_end()
        back.close()
        got = [json.loads(e.data)["token_id"] for e in seen + rest if e.event == "token"]
        assert got == tokens
        assert json.loads(rest[-1].data)["finish_reason"] == "length"
        assert [int(e.id.split(":")[1]) for e in seen + rest] == list(range(len(tokens) + 2))
        assert wait_idle(url)["tokens_after_leave"] == 1
    assert engine.core.is_drained()


def test_resume_grace_runs_out_and_the_stream_is_cancelled():
    app, engine, runner = held_app(ServeSettings(resume_grace_s=0.2))
    with running_server(app) as url:
        client = RawStream(url, "/v1/stream", {"prompt": "gone for good", "max_new_tokens": 100})
        client.read_events(3)
        rid = client.headers["x-request-id"]
        _leave_between_steps(url, runner, client)
        after = wait_idle(url)
        assert after["aborts"]["cancelled"] == 1 and after["streams_in_grace"] == 0
        _, _, replay = _events(url, None, path=f"/v1/stream/{rid}")
        assert replay[-1][0] == "done" and replay[-1][2]["finish_reason"] == "cancelled"
        assert replay[-1][2]["usage"]["completion_tokens"] == len(replay) - 2
    assert engine.core.is_drained()


@pytest.mark.parametrize("retry_ms", [1000, 250, 0])
def test_an_own_format_stream_opens_with_the_retry_an_eventsource_takes(retry_ms):
    app, engine = tiny_app(ServeSettings(sse_retry_ms=retry_ms))
    with running_server(app) as url:
        posted, raw, events = _events(url, {"prompt": "retry", "max_new_tokens": 2})
        rid = posted.headers["x-request-id"]
        opening = f"retry: {retry_ms}\n".encode() if retry_ms else b""
        assert raw.startswith(opening + f"id: {rid}:0\nevent: start\n".encode())
        assert [e for e, _, _ in events] == ["start", "token", "token", "done"]
        followed, raw, _ = _events(url, None, {"Last-Event-ID": f"{rid}:1"},
                                   path=f"/v1/stream/{rid}")
        assert raw.startswith(opening + f"id: {rid}:2\nevent: token\n".encode())
        with httpx.stream("POST", url + "/v1/chat/completions", timeout=30, json={
                "messages": [{"role": "user", "content": "no retry here"}], "max_tokens": 2,
                "stream": True}) as r:
            assert r.read().startswith(b"data: {")
    parser = SSEParser()
    parser.feed(opening + b"id: x:0\nevent: start\ndata: {}\n\n")
    assert parser.retry_ms == (retry_ms or None)
    assert engine.core.is_drained()
