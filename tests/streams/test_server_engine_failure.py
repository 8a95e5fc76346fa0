"""An engine that fails, behind a real uvicorn: a stream the engine cannot serve
ends with `error` and the others go on; an event the hub cannot handle ends its
own stream only; and an engine that cannot step on ends every open stream with
its last event, says 503 at /health, and refuses new work with 503 in each
API's envelope instead of accepting it into a dead engine."""
import json

import httpx

from live_server import RawStream, held_app, running_server, stats, tiny_app, wait_for, wait_idle
from scheduler import TokenEvent

NEW = 12


def tokens_of(events) -> list[int]:
    return [json.loads(e.data)["token_id"] for e in events if e.event == "token"]


def test_an_engine_that_cannot_step_on_ends_every_stream_and_refuses_new_work(monkeypatch):
    app, engine, runner = held_app()
    with running_server(app) as url:
        runner.hold()
        streams = [RawStream(url, "/v1/stream", {"prompt": f"stream {i}", "max_new_tokens": 50})
                   for i in range(3)]
        for stream in streams:
            assert stream.read_head() == 200
        runner.blocked.wait(10)

        def broken():
            raise KeyError("the core lost track")

        monkeypatch.setattr(engine.core, "plan", broken)
        runner.release()
        for stream in streams:
            events = stream.read_to_end()
            assert [e.event for e in events[-2:]] == ["error", "done"]
            assert json.loads(events[-1].data)["finish_reason"] == "error"
            stream.close()
        health = httpx.get(url + "/health")
        assert health.status_code == 503 and health.json()["status"] == "engine_stopped"
        own = httpx.post(url + "/v1/stream", json={"prompt": "late", "max_new_tokens": 4})
        assert own.status_code == 503 and own.json()["error"]["type"] == "unavailable"
        assert "retry-after" in own.headers
        openai = httpx.post(url + "/v1/completions", json={"prompt": "late", "max_tokens": 4})
        assert openai.status_code == 503 and "message" in openai.json()["error"]
        after = stats(url)
        assert after["engine_stopped"] and after["streams_open"] == 0
        wait_for(lambda: stats(url)["readers"] == 0, what="the readers to let go")


def test_an_event_the_hub_cannot_handle_ends_its_own_stream_only(monkeypatch):
    app, engine = tiny_app()
    step = engine.step
    broken: list[str] = []

    def step_with_a_stray_event(early=None):
        output = step(early)
        for e in output.events:
            if isinstance(e, TokenEvent) and e.index == 3 and not broken:
                broken.append(e.seq_id)
                del output.deltas[e.seq_id]  # its text is missing: the hub cannot show it
        return output

    monkeypatch.setattr(engine, "step", step_with_a_stray_event)
    with running_server(app) as url:
        first = RawStream(url, "/v1/stream", {"prompt": "first", "max_new_tokens": NEW,
                                              "ignore_eos": True})
        first.read_events(1)
        second = RawStream(url, "/v1/stream", {"prompt": "second", "max_new_tokens": NEW,
                                               "ignore_eos": True})
        ends = {}
        for name, stream in (("first", first), ("second", second)):
            events = stream.read_to_end()
            ends[stream.headers["x-request-id"]] = (json.loads(events[-1].data)["finish_reason"],
                                                   len(tokens_of(events)))
            stream.close()
        after = wait_idle(url)
    assert ends.pop(broken[0]) == ("error", 3)
    assert list(ends.values()) == [("length", NEW)]
    assert after["blocks_reserved"] == 0 and after["admissions"] == after["releases"] == 2
    assert engine.core.is_drained()
