"""Everything refusable is refused before the first byte, as a JSON error in the
API's own envelope with the right status, and leaves nothing held behind."""
import httpx
import pytest

from scheduler.settings import ServeSettings
from live_server import (TOY_CONTEXT, TOY_NAME, RawStream, held_app, running_server, stats,
                         tiny_app, wait_for, wait_idle)
from wire_apis import APIS, DROP, IDS, openai_error, refused


@pytest.fixture(scope="module")
def server():
    """One small server for the refusals that need no special settings."""
    app, engine = tiny_app(ServeSettings(max_body_bytes=4096), num_blocks=48)
    with running_server(app) as url:
        yield url
    assert engine.core.is_drained()


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_malformed_json_and_non_objects_are_400(server, api):
    _, error = refused(server, api, 400, content=b'{"prompt": "hello", ',
                        headers={"content-type": "application/json"})
    assert "JSON" in error["message"]
    refused(server, api, 400, content=b"[1, 2]")
    refused(server, api, 400, content=b"\xff\xfe not utf-8")


MISSING = {"stream": "max_new_tokens", "completions": "prompt", "chat": "messages",
           "messages": "max_tokens"}
WRONG_TYPES = {
    "stream": [{"prompt": 12}, {"prompt_tokens": ["a"]}, {"temperature": "hot"},
               {"stop": 3}, {"ignore_eos": "yes"}, {"prompt": "x", "prompt_tokens": [1]},
               {"prompt_tokens": [1, 100000]}, {"seed": 1.5}],
    "completions": [{"prompt": 12}, {"stream": "yes"}, {"top_p": 0}, {"n": 2},
                    {"stream_options": "usage"}, {"prompt": ["a", "b"]}],
    "chat": [{"messages": "hello"}, {"messages": [{"role": "wizard", "content": "x"}]},
             {"messages": [{"role": "user", "content": 5}]},
             {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
             {"temperature": 3}, {"max_completion_tokens": "many"}],
    "messages": [{"messages": []}, {"messages": [{"role": "system", "content": "x"}]},
                 {"system": 5}, {"stop_sequences": [1]}, {"temperature": 1.5}],
}


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_missing_and_wrongly_typed_fields_are_400_naming_the_field(server, api):
    _, error = refused(server, api, 400, json=api.valid(**{MISSING[api.name]: DROP}))
    assert MISSING[api.name] in error["message"]
    for override in WRONG_TYPES[api.name]:
        refused(server, api, 400, json=api.valid(**override))


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_max_tokens_out_of_range(server, api):
    for bad in (0, -3, 1.5, True):
        _, error = refused(server, api, 400, json=api.valid(**{api.max_tokens: bad}))
        if api.name != "messages":
            assert error["param"] == api.max_tokens
    # more than the context holds after the prompt: too long, 422
    refused(server, api, 422, json=api.valid(**{api.max_tokens: TOY_CONTEXT}))


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_prompts_too_long_for_the_model_or_the_pool_are_422(server, api):
    too_long = "x" * (TOY_CONTEXT + 10)
    field = {"stream": "prompt", "completions": "prompt"}.get(api.name)
    if field:
        body = api.valid(**{field: too_long})
    else:
        body = api.valid(messages=[{"role": "user", "content": too_long}])
    _, error = refused(server, api, 422, json=body)
    assert "context" in error["message"]
    # fits the context (256) but not the pool: 48 blocks of 4 tokens hold 192
    fits_context = "x" * 150
    body = api.valid(**{field: fits_context}) if field else \
        api.valid(messages=[{"role": "user", "content": fits_context}])
    body[api.max_tokens] = 80
    _, error = refused(server, api, 422, json=body)
    assert "blocks" in error["message"]


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_body_over_the_limit_is_413_whether_declared_or_chunked(server, api):
    big = api.valid(padding="x" * 5000)
    refused(server, api, 413, json=big)

    def chunks():  # no Content-Length: the limit holds while reading
        yield b'{"padding": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'
    refused(server, api, 413, content=chunks())


@pytest.mark.parametrize("api", [a for a in APIS if a.name != "stream"], ids=IDS[1:])
def test_a_model_not_served_is_404_but_default_and_the_listed_one_are_served(server, api):
    _, error = refused(server, api, 404, json=api.valid(model="gpt-17"))
    assert "gpt-17" in error["message"]
    for name in (TOY_NAME, "default"):
        assert httpx.post(server + api.path, json=api.valid(model=name), timeout=30).status_code == 200
    models = httpx.get(server + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [TOY_NAME]
    assert httpx.get(server + f"/v1/models/{TOY_NAME}").json()["id"] == TOY_NAME
    r = httpx.get(server + "/v1/models/gpt-17")
    assert r.status_code == 404 and openai_error(r.json())["code"] == "model_not_found"
    wait_idle(server)


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_unknown_fields_are_ignored(server, api):
    body = api.valid(user="someone", frobnicate={"level": 3}, logit_bias=None)
    r = httpx.post(server + api.path, json=body, timeout=30)
    assert r.status_code == 200
    wait_idle(server)


def test_the_waiting_limit_gives_429_with_retry_after():
    app, engine, runner = held_app(ServeSettings(retry_after_s=7), max_batch=1, max_waiting=1)
    with running_server(app) as url:
        running = RawStream(url, "/v1/stream", {"prompt": "runs", "max_new_tokens": 50})
        running.read_events(2)
        runner.hold_and_wait()
        waiting = RawStream(url, "/v1/stream", {"prompt": "waits", "max_new_tokens": 5})
        assert waiting.read_head() == 200
        for api in APIS:
            r = httpx.post(url + api.path, json=api.valid(), timeout=30)
            assert r.status_code == 429 and r.headers["retry-after"] == "7"
            api.error(r.json())
        runner.release()
        waiting.read_to_end()
        running.read_to_end()
        running.close()
        waiting.close()
        assert wait_idle(url)["finished"] == {"length": 2}
    assert engine.core.is_drained()


def test_a_server_shutting_down_refuses_with_503():
    app, engine = tiny_app(ServeSettings(retry_after_s=2))
    with running_server(app) as url:
        app.state.service.request_shutdown()
        wait_for(lambda: stats(url)["shutting_down"], what="shutdown")
        for api in APIS:
            r = httpx.post(url + api.path, json=api.valid(), timeout=30)
            assert r.status_code == 503 and r.headers["retry-after"] == "2"
            api.error(r.json())
        assert httpx.get(url + "/health").status_code == 503
    assert engine.core.is_drained()


def test_refusals_are_counted_in_metrics(server):
    httpx.post(server + "/v1/stream", content=b"{")
    text = httpx.get(server + "/metrics").text
    assert 'twinstep_requests_refused_total{status="400"}' in text
