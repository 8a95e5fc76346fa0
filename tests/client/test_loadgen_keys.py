"""The load generator on a server with keys: each request sends the secret of its
trace key name, a key's limit is recorded as `key_limit` (as the simulator records
it), and a trace naming a key without a secret is refused before anything is sent."""
import threading

import pytest

from live.client.loadgen import replay
from live.client.refusal import refusal_for
from live.client.request_body import PromptFiller
from live_server import held_app, running_server, wait_idle
from scheduler.settings import ServeSettings
from traces.names import named_keys
from traces.outcome import Refusal
from traces.record import TraceRequest
from tiny_models import VOCAB

FILLER = PromptFiller(low=1, high=VOCAB)
KEYS = named_keys(["alice:alice-secret", "bob:bob-secret"])
ADMIN = "admin-secret"


def trace(keys: list[str | None]) -> list[TraceRequest]:
    return [TraceRequest(f"r{i}", 0.0, 4, 8, key=key) for i, key in enumerate(keys)]


def test_each_request_sends_its_keys_secret_and_a_key_at_its_limit_is_key_limit():
    app, engine, runner = held_app(ServeSettings(api_key=tuple(f"{n}:{s}" for n, s in KEYS.items()),
                                                 admin_key=ADMIN), max_streams_per_key=2)
    requests = trace(["alice"] * 3 + ["bob"] * 2)
    with running_server(app) as url:
        runner.hold()  # nothing finishes while the five arrive at once
        release = threading.Timer(2.0, runner.release)
        release.start()
        result = replay(url, requests, keys=KEYS, admin_key=ADMIN, settle_s=10,
                        prompt_filler=FILLER)
        release.join()
        wait_idle(url, {"Authorization": f"Bearer {ADMIN}"})
    refused = {o.id: o.refused for o in result.outcomes if o.refused}
    assert list(refused.values()) == [Refusal.KEY_LIMIT] and set(refused) <= {"r0", "r1", "r2"}
    assert {o.id for o in result.outcomes if o.finish_reason == "length"} == \
        {f"r{i}" for i in range(5)} - set(refused)
    assert result.stats_after is not None  # read with the admin key
    assert engine.core.is_drained()


def test_without_a_secret_a_request_is_401_and_a_trace_naming_an_unknown_key_is_refused():
    app, engine, _ = held_app(ServeSettings(api_key=("alice:alice-secret",)))
    with running_server(app) as url:
        result = replay(url, trace([None]), settle_s=0, prompt_filler=FILLER)
        assert result.outcomes[0].refused == Refusal.INVALID
        assert result.problems["r0"].startswith("401 no API key was sent")
        with pytest.raises(ValueError, match="no secret given: carol"):
            replay(url, trace(["alice", "carol"]), keys={"alice": "alice-secret"})
        served = replay(url, trace([None]), api_key="alice-secret", settle_s=0,
                        prompt_filler=FILLER)
        assert served.outcomes[0].refused is None and served.outcomes[0].tokens_read == 8
    assert engine.core.is_drained()


@pytest.mark.parametrize("body, refusal", [
    (b'{"error": {"type": "key_limit", "message": "m", "param": null}}', Refusal.KEY_LIMIT),
    (b'{"error": {"message": "m", "type": "rate_limit_error", "param": null, "code": "key_limit"}}',
     Refusal.KEY_LIMIT),
    (b'{"error": {"type": "queue_full", "message": "m", "param": null}}', Refusal.QUEUE_FULL),
    (b'not json', Refusal.QUEUE_FULL), (b'[1]', Refusal.QUEUE_FULL),
])
def test_a_429_is_a_keys_limit_when_its_envelope_says_so(body, refusal):
    assert refusal_for(429, body) is refusal
