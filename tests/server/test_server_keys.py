"""Keys over a real server: every path but /health needs a client key (Bearer or
x-api-key), refused with 401 in its API's envelope; a stream and its request id
belong to the key that opened it; the operational paths need the admin key; and
the per-key limits answer 429 with Retry-After before the first byte."""
import json
import subprocess
import sys

import anthropic
import httpx
import openai
import pytest

from live.server.access import KeyRing
from live_server import (TOY_NAME, held_app, running_server, stats, tiny_app, wait_for,
                         wait_idle)
from scheduler.settings import ServeSettings
from wire_apis import APIS, IDS

KEYS = ("alice:alice-secret-1", "bob:bob-secret-2")
ALICE = {"Authorization": "Bearer alice-secret-1"}
BOB = {"x-api-key": "bob-secret-2"}
ADMIN = {"Authorization": "Bearer admin-secret-9"}
OPERATIONS = ["/stats", "/metrics", "/v1/engine", "/v1/steps", "/v1/requests"]


@pytest.fixture(scope="module")
def server():
    app, engine = tiny_app(ServeSettings(api_key=KEYS, admin_key="admin-secret-9"))
    with running_server(app) as url:
        yield url
        wait_idle(url, ADMIN)
    assert engine.core.is_drained()


def sse_ids_and_tokens(text: str) -> tuple[list[str], list[int]]:
    ids = [line[4:] for line in text.splitlines() if line.startswith("id: ")]
    tokens = [int(line.split('"token_id":')[1].split(",")[0])
              for line in text.splitlines() if '"token_id":' in line]
    return ids, tokens


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_request_without_a_valid_key_is_401_in_its_envelope(server, api):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": "admin-secret-9"},
                    {"Authorization": "Basic alice-secret-1"}):
        r = httpx.post(server + api.path, json=api.valid(), headers=headers)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == 'Bearer realm="twinstep"'
        error = api.error(r.json())
        assert "key" in error["message"]
    kinds = {"stream": "unauthorized", "completions": "invalid_request_error",
             "chat": "invalid_request_error", "messages": "authentication_error"}
    assert error["type"] == kinds[api.name]
    if api.name in ("completions", "chat"):
        assert error["code"] == "invalid_api_key"
    for headers in (ALICE, BOB):
        assert httpx.post(server + api.path, json=api.valid(), headers=headers).status_code == 200
    assert stats(server, ADMIN)["blocks_reserved"] == 0


def test_health_is_open_and_every_other_path_needs_a_key(server):
    assert httpx.get(server + "/health").status_code == 200
    assert httpx.get(server + "/v1/models").status_code == 401
    assert httpx.get(server + "/v1/models", headers=BOB).json()["data"][0]["id"] == TOY_NAME
    # a path no route serves is not told apart from one that needs a key
    assert httpx.get(server + "/v1/nothing-here").status_code == 401
    assert httpx.get(server + "/v1/nothing-here", headers=ALICE).status_code == 404


def test_the_official_sdks_send_their_keys(server):
    good = openai.OpenAI(base_url=f"{server}/v1", api_key="alice-secret-1")
    answer = good.chat.completions.create(model=TOY_NAME, max_tokens=4,
                                          messages=[{"role": "user", "content": "hi"}])
    assert answer.usage.completion_tokens == 4
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server}/v1", api_key="nope", max_retries=0).models.list()
    claude = anthropic.Anthropic(base_url=server, api_key="bob-secret-2")
    message = claude.messages.create(model=TOY_NAME, max_tokens=4,
                                     messages=[{"role": "user", "content": "hi"}])
    assert message.usage.output_tokens == 4
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server, api_key="nope", max_retries=0).messages.create(
            model=TOY_NAME, max_tokens=4, messages=[{"role": "user", "content": "hi"}])


def test_a_stream_and_its_request_id_belong_to_its_key(server):
    body = {"prompt": "hello", "max_new_tokens": 5}
    alice = httpx.post(server + "/v1/stream", json=body,
                       headers={**ALICE, "X-Request-Id": "job-1"})
    assert alice.status_code == 200
    ids, tokens = sse_ids_and_tokens(alice.text)
    assert alice.headers["x-request-id"] == "job-1" and ids[0] == "job-1:0"
    # bob cannot see alice's stream, nor tell it from one that never was
    theirs = httpx.get(server + "/v1/stream/job-1", headers=BOB)
    never = httpx.get(server + "/v1/stream/never-was", headers=BOB)
    assert theirs.status_code == never.status_code == 404
    assert theirs.json()["error"]["message"].replace("job-1", "X") == \
        never.json()["error"]["message"].replace("never-was", "X")
    # ...and may name a stream of his own the same
    bob = httpx.post(server + "/v1/stream", json=body, headers={**BOB, "X-Request-Id": "job-1"})
    assert bob.status_code == 200 and sse_ids_and_tokens(bob.text)[0][0] == "job-1:0"
    # alice replays hers; her id is still taken for her
    replay = httpx.get(server + "/v1/stream/job-1", headers=ALICE)
    assert replay.status_code == 200 and sse_ids_and_tokens(replay.text)[1] == tokens
    again = httpx.post(server + "/v1/stream", json=body, headers={**ALICE, "X-Request-Id": "job-1"})
    assert again.status_code == 409
    records = [r for r in _records(server) if r["id"] == "job-1"]
    assert sorted(r["key"] for r in records) == ["alice", "bob"]


def _records(url):
    lines = httpx.get(url + "/v1/requests", headers=ADMIN).text.splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("path", OPERATIONS)
def test_operations_need_the_admin_key(server, path):
    assert httpx.get(server + path).status_code == 401
    refused = httpx.get(server + path, headers=ALICE)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "forbidden"
    assert httpx.get(server + path, headers=ADMIN).status_code == 200
    assert httpx.get(server + path, headers={"x-api-key": "admin-secret-9"}).status_code == 200


def test_the_engine_description_shows_no_secret(server):
    r = httpx.get(server + "/v1/engine", headers=ADMIN)
    settings = r.json()["settings"]
    assert settings["api_key"] == "<2 hidden>" and settings["admin_key"] == "<hidden>"
    assert b"secret" not in r.content


def test_with_client_keys_and_no_admin_key_operations_are_closed():
    app, engine = tiny_app(ServeSettings(api_key=KEYS))
    with running_server(app) as url:
        for path in OPERATIONS:
            r = httpx.get(url + path, headers=ALICE)
            assert r.status_code == 403 and "no admin key" in r.json()["error"]["message"]
        assert httpx.post(url + "/v1/stream", json={"prompt": "hi", "max_new_tokens": 2},
                          headers=ALICE).status_code == 200
    assert engine.core.is_drained()


def test_an_admin_key_alone_guards_operations_and_leaves_generation_open():
    app, engine = tiny_app(ServeSettings(admin_key="admin-secret-9"))
    with running_server(app) as url:
        assert httpx.get(url + "/stats").status_code == 401
        assert httpx.get(url + "/stats", headers=ADMIN).status_code == 200
        assert httpx.post(url + "/v1/stream",
                          json={"prompt": "hi", "max_new_tokens": 2}).status_code == 200
    assert engine.core.is_drained()


def _metric(url, name, **labels):
    text = httpx.get(url + "/metrics", headers=ADMIN).text
    wanted = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    (line,) = [line for line in text.splitlines() if line.startswith(wanted + " ")]
    return float(line.split()[-1])


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_key_at_its_stream_limit_gets_429_and_the_other_key_does_not(api):
    app, engine, runner = held_app(ServeSettings(api_key=KEYS, admin_key="admin-secret-9",
                                                 retry_after_s=3),
                                   max_streams_per_key=2)
    streaming = api.valid() if api.name == "stream" else api.valid(stream=True)
    with running_server(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        runner.hold()
        opened = []
        for _ in range(2):
            request = client.build_request("POST", api.path, headers=ALICE, json=streaming)
            opened.append(client.send(request, stream=True))
            assert opened[-1].status_code == 200
        refused = client.post(api.path, json=api.valid(), headers=ALICE)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "3"
        error = api.error(refused.json())
        assert "'alice' holds 2 streams" in error["message"]
        expected = {"stream": "key_limit", "messages": "rate_limit_error"}.get(api.name)
        assert error["type"] == expected if expected else error["code"] == "key_limit"
        assert _metric(url, "twinstep_key_streams", key="alice") == 2
        assert _metric(url, "twinstep_key_streams", key="bob") == 0
        assert _metric(url, "twinstep_key_refused_total", key="alice", limit="streams") == 1
        other = client.build_request("POST", api.path, headers=BOB, json=streaming)
        bob = client.send(other, stream=True)
        assert bob.status_code == 200
        runner.release()
        for response in opened + [bob]:
            response.read()
            response.close()
        wait_idle(url, ADMIN)
        assert _metric(url, "twinstep_key_streams", key="alice") == 0
        # what alice held is back: she may open streams again
        assert client.post(api.path, json=api.valid(), headers=ALICE).status_code == 200
        wait_idle(url, ADMIN)
    assert engine.core.is_drained()


def test_the_waiting_limit_counts_only_requests_not_yet_admitted():
    app, engine, runner = held_app(ServeSettings(api_key=KEYS, admin_key="admin-secret-9"),
                                   max_batch=1, max_waiting_per_key=1)
    body = {"prompt": "hello", "max_new_tokens": 3}
    with running_server(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        runner.hold()
        first = client.send(client.build_request("POST", "/v1/stream", json=body, headers=ALICE),
                            stream=True)
        # planned, so admitted: alice now waits for nothing
        wait_for(lambda: runner.blocked.is_set(), what="alice's first to be planned")
        assert _metric(url, "twinstep_key_waiting", key="alice") == 0
        second = client.send(client.build_request("POST", "/v1/stream", json=body, headers=ALICE),
                             stream=True)
        assert second.status_code == 200  # it waits: the batch holds one
        third = client.post("/v1/stream", json=body, headers=ALICE)
        assert third.status_code == 429 and "waiting requests" in third.json()["error"]["message"]
        assert _metric(url, "twinstep_key_waiting", key="alice") == 1
        runner.release()
        for response in (first, second):
            response.read()
            response.close()
        wait_idle(url, ADMIN)
    assert engine.core.is_drained()


def test_key_settings_are_checked_before_a_model_loads(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("# team keys\nalice:a-1\n\n  b-2  \n")
    ring = KeyRing.load(ServeSettings(api_key=("carol:c-3",), api_keys_file=str(keys_file)))
    assert ring.names == ["carol", "alice", "key-3"]
    bad = [(dict(api_key=("a b",)), "printable"),
           (dict(api_key=("x/y:s1",)), "a name is"),
           (dict(api_key=("a:s1", "a:s2")), "given twice"),
           (dict(api_key=("a:s1", "b:s1")), "same secret"),
           (dict(api_key=("a:s1",), admin_key="s1"), "also a client key"),
           (dict(max_streams_per_key=4), "give client keys"),
           (dict(api_keys_file=str(tmp_path / "missing")), "cannot read")]
    for settings, message in bad:
        with pytest.raises(ValueError, match=message):
            KeyRing.load(ServeSettings(**settings))
    done = subprocess.run([sys.executable, "-m", "live", "serve", "--max-waiting-per-key", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "python -m live serve: max_waiting_per_key count what each client key holds: give "
        "client keys (api_key or api_keys_file)"]
