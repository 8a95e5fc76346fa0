"""`GET /v1/requests`: what the engine did for each finished request, which its
client cannot know (admission, tokens made, tokens made after it left), paged as
`/v1/steps` pages steps."""
import json

import httpx

from live.streams.request_log import FIELDS, RequestLog
from live_server import RawStream, running_server, stats, tiny_app, wait_for, wait_idle


def records(url: str, **params) -> list[dict]:
    r = httpx.get(url + "/v1/requests", params=params)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in r.text.splitlines()]


def test_a_reader_to_the_end_and_a_leaver_as_the_engine_saw_them():
    app, _ = tiny_app(max_batch=4)
    with running_server(app) as url:
        assert httpx.get(url + "/v1/engine").json()["requests"]["last"] == 0
        whole = httpx.post(url + "/v1/stream", json={"prompt": "read me", "max_new_tokens": 6},
                           headers={"X-Request-Id": "whole"})
        assert whole.status_code == 200
        leaver = RawStream(url, "/v1/stream", {"prompt": "leave me", "max_new_tokens": 200},
                           headers={"X-Request-Id": "leaver"})
        assert leaver.read_head() == 200
        read = [e for e in leaver.read_events(4) if e.event == "token"]
        leaver.reset()
        end = wait_idle(url)
        got = {r["id"]: r for r in records(url)}
        assert httpx.get(url + "/v1/engine").json()["requests"]["last"] == 2

    assert set(got) == {"whole", "leaver"} and all(list(r) == list(FIELDS) for r in got.values())
    assert sorted(r["n"] for r in got.values()) == [1, 2]
    w, gone = got["whole"], got["leaver"]
    assert (w["finish_reason"], w["completion_tokens"], w["tokens_after_leave"], w["left_unix"]) == (
        "length", 6, 0, None)
    assert w["arrival_unix"] <= w["admitted_unix"] <= w["first_token_unix"] <= w["finish_unix"]
    assert gone["finish_reason"] == "cancelled" and gone["left_unix"] is not None
    assert len(read) <= gone["completion_tokens"] < 200
    assert gone["arrival_unix"] <= gone["left_unix"] <= gone["finish_unix"]
    # the server's total of wasted tokens is the sum of the requests'
    assert gone["tokens_after_leave"] == end["tokens_after_leave"]


def test_pages_and_the_requests_that_fell_out_of_the_ring():
    app, _ = tiny_app()
    app.state.service.hub.requests = RequestLog(ring_size=3)
    with running_server(app) as url:
        for i in range(5):
            httpx.post(url + "/v1/stream", json={"prompt": f"r{i}", "max_new_tokens": 2},
                       headers={"X-Request-Id": f"r{i}"})
        wait_for(lambda: stats(url)["finished"]["length"] == 5 or None, what="five requests")
        assert [r["id"] for r in records(url, after=2)] == ["r2", "r3", "r4"]
        assert [r["id"] for r in records(url, after=2, limit=2)] == ["r2", "r3"]
        assert records(url, after=5) == []
        lost = httpx.get(url + "/v1/requests", params={"after": 0})
        assert lost.status_code == 410 and lost.headers["x-records-lost-through"] == "2"
        assert "requests 1 to 2 fell out of the ring of the last 3 requests" in lost.json()["error"]["message"]
        assert httpx.get(url + "/v1/requests", params={"limit": 0}).status_code == 400


def test_the_load_generator_names_the_streams_it_can():
    from live.client.loadgen import replay
    from live.client.request_body import PromptFiller
    from tiny_models import VOCAB
    from traces.record import TraceRequest

    trace = [TraceRequest("t-1", 0.0, 4, 3), TraceRequest("t 2", 0.05, 4, 3)]  # a space: not an id
    app, _ = tiny_app()
    with running_server(app) as url:
        result = replay(url, trace, request_id_prefix="run7-",
                        prompt_filler=PromptFiller(low=1, high=VOCAB))
        wait_idle(url)
        names = [r["id"] for r in records(url)]
    assert result.problems == {} and all(o.finish_reason == "length" for o in result.outcomes)
    assert len(names) == 2 and "run7-t-1" in names
    (other,) = [n for n in names if n != "run7-t-1"]
    assert len(other) == 16 and int(other, 16) >= 0  # the server named it
