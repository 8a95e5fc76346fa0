"""The project's own stream as a third-party SSE client reads it: httpx-sse parses
`POST /v1/stream` and a `GET /v1/stream/{id}` that resumes after `Last-Event-ID`
from a real uvicorn server."""
import json

import httpx
import pytest
from httpx_sse import connect_sse

from live.runner.params import SamplingParams
from scheduler.settings import ServeSettings
from live_server import (ToyTokenizer, engine_alone, held_app, running_server, stats, tiny_app,
                         wait_for, wait_idle)

TOK = ToyTokenizer()

GREEDY = {}
SEEDED = {"temperature": 0.8, "top_p": 0.9, "top_k": 50, "seed": 77}


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_httpx_sse_reads_the_stream_the_engine_makes(sampling):
    prompt, n = "a third-party client reads", 24
    tokens, text, _ = engine_alone(TOK.encode(prompt), n, SamplingParams(**sampling))
    app, engine = tiny_app()
    with running_server(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        with connect_sse(client, "POST", "/v1/stream",
                         json={"prompt": prompt, "max_new_tokens": n, **sampling}) as source:
            assert source.response.status_code == 200
            rid = source.response.headers["x-request-id"]
            events = list(source.iter_sse())
        # the same request, not streamed, through the OpenAI completions route
        answer = client.post("/v1/completions", json={
            "prompt": prompt, "max_tokens": n, "temperature": 0.0, **sampling}).json()
        wait_idle(url)
    assert [e.event for e in events] == ["start"] + ["token"] * n + ["done"]
    assert [e.id for e in events] == [f"{rid}:{seq}" for seq in range(n + 2)]
    data = [json.loads(e.data) for e in events]
    assert data[0] == {"id": rid, "prompt_tokens": len(prompt)}
    assert [d["token_id"] for d in data[1:-1]] == tokens
    streamed = "".join(d["text"] for d in data[1:-1]) + data[-1].get("text", "")
    assert streamed == text == answer["choices"][0]["text"]
    assert data[-1]["finish_reason"] == "length"
    assert data[-1]["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": n}
    assert engine.core.is_drained()


def test_httpx_sse_resumes_after_last_event_id_with_exactly_the_missing_events():
    prompt, n = "leave and come back", 30
    tokens, text, _ = engine_alone(TOK.encode(prompt), n)
    app, engine, runner = held_app(ServeSettings(resume_grace_s=60))
    with running_server(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        with connect_sse(client, "POST", "/v1/stream",
                         json={"prompt": prompt, "max_new_tokens": n}) as source:
            rid = source.response.headers["x-request-id"]
            seen = []
            for event in source.iter_sse():
                seen.append(event)
                if len(seen) == 5:  # start and four tokens
                    runner.hold_and_wait()
                    break
        # leaving closed the connection; the stream waits, paused, for its client
        wait_for(lambda: stats(url)["streams_in_grace"] == 1, what="the stream to wait")
        runner.release()
        paused = wait_for(lambda: (s := stats(url))["paused"] == 1 and s, what="the pause")
        assert paused["streams_open"] == 1 and paused["readers"] == 0
        with connect_sse(client, "GET", f"/v1/stream/{rid}",
                         headers={"Last-Event-ID": seen[-1].id}) as source:
            assert source.response.status_code == 200
            rest = list(source.iter_sse())
        after = wait_idle(url)
    last_seen = int(seen[-1].id.split(":")[1])
    assert [e.id for e in rest] == [f"{rid}:{seq}" for seq in range(last_seen + 1, n + 2)]
    assert [e.event for e in seen + rest] == ["start"] + ["token"] * n + ["done"]
    data = [json.loads(e.data) for e in seen + rest]
    assert [d["index"] for d in data[1:-1]] == list(range(n))
    assert [d["token_id"] for d in data[1:-1]] == tokens
    assert "".join(d["text"] for d in data[1:-1]) == text
    assert data[-1]["finish_reason"] == "length"
    assert (after["admissions"], after["releases"], after["readers"]) == (1, 1, 0)
    assert engine.core.is_drained()
