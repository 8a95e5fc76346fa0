"""The server judges each stream by its SLO, as it sees it (from arrival to each
token reaching the hub): /metrics counts the requests judged, those that met it
and their tokens (goodput); a client that left is not judged, one refused for an
over-long prompt neither."""
import httpx

from live_server import (RawStream, held_app, running_server, stats, tiny_app, wait_for,
                         wait_idle)
from scheduler.settings import ServeSettings


def counter(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def slo_counts(url: str) -> tuple[float, float, float]:
    text = httpx.get(url + "/metrics").text
    return tuple(counter(text, f"twinstep_slo_{name}_total")
                 for name in ("judged", "met", "goodput_tokens"))


def test_streams_that_ran_within_the_slo_are_met_and_their_tokens_are_goodput():
    app, engine = tiny_app(ServeSettings(slo_ttft_s=60.0, slo_tpot_s=60.0))
    with running_server(app) as url:
        for n in (5, 3):
            r = httpx.post(url + "/v1/stream", json={"prompt": "judge me", "max_new_tokens": n})
            assert r.status_code == 200
        r = httpx.post(url + "/v1/stream", json={"prompt": "x" * 10_000, "max_new_tokens": 4})
        assert r.status_code == 422
        wait_idle(url)
        assert slo_counts(url) == (2.0, 2.0, 8.0)
    assert engine.core.is_drained()


def test_a_target_no_stream_can_meet_is_missed_by_every_stream_judged():
    app, engine = tiny_app(ServeSettings(slo_tpot_s=1e-9))
    with running_server(app) as url:
        httpx.post(url + "/v1/stream", json={"prompt": "too slow", "max_new_tokens": 4})
        httpx.post(url + "/v1/stream", json={"prompt": "one token", "max_new_tokens": 1})
        wait_idle(url)
        # a single token has no time per output token to miss
        assert slo_counts(url) == (2.0, 1.0, 1.0)


def test_a_client_that_left_is_not_judged():
    app, engine, runner = held_app(ServeSettings(slo_ttft_s=60.0))
    with running_server(app) as url:
        runner.hold()
        client = RawStream(url, "/v1/stream", {"prompt": "leaves", "max_new_tokens": 20})
        runner.blocked.wait(10)
        runner.allow(2)
        assert [e.event for e in client.read_events(3)] == ["start", "token", "token"]
        client.reset()
        wait_for(lambda: stats(url)["streams_open"] == 0, what="the server to see it leave")
        runner.release()
        after = wait_idle(url)
        assert after["aborts"]["cancelled"] == 1
        assert slo_counts(url) == (0.0, 0.0, 0.0)


def test_without_an_slo_there_are_no_slo_series():
    app, _ = tiny_app()
    with running_server(app) as url:
        assert "twinstep_slo" not in httpx.get(url + "/metrics").text
