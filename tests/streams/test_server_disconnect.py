"""A client that leaves, by FIN or RST, at each moment of its stream: the cancel
reaches the engine at once, the engine makes at most the token of the step already
under way, a stream still waiting is never admitted, and every block comes back."""
import json
import random
import threading

import httpx
import pytest

from scheduler.settings import ServeSettings
from live_server import (RawStream, held_app, running_server, stats, tiny_app, wait_for,
                         wait_idle)

HOW = ["fin", "rst"]


def leave(client: RawStream, how: str) -> None:
    client.finish() if how == "fin" else client.reset()


def _wait_closed(url: str, open_streams: int = 0) -> None:
    wait_for(lambda: stats(url)["streams_open"] == open_streams, what="the hub to close the stream")


@pytest.mark.parametrize("how", HOW)
def test_leaving_while_waiting_for_a_slot_is_never_admitted(how):
    app, engine, runner = held_app(max_batch=1)
    with running_server(app) as url:
        first = RawStream(url, "/v1/stream", {"prompt": "holds the slot", "max_new_tokens": 30})
        first.read_events(2)
        runner.hold_and_wait()
        second = RawStream(url, "/v1/stream", {"prompt": "waits", "max_new_tokens": 5})
        assert second.read_head() == 200 and second.read_events(1)[0].event == "start"
        rid = second.headers["x-request-id"]
        runner.allow(1)  # the next plan takes it from the inbox into the waiting queue
        assert [seq.id for seq in engine.core.waiting] == [rid]
        leave(second, how)
        _wait_closed(url, open_streams=1)
        runner.release()
        first.read_to_end()
        first.close()
        second.close()
        after = wait_idle(url)
    assert rid not in runner.prefilled
    assert after["aborts"]["cancelled"] == 1 and after["finished"] == {"length": 1, "cancelled": 1}
    assert after["tokens_after_leave"] == 0
    assert engine.core.is_drained()


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("moment", ["after_headers", "mid_stream", "near_the_end"])
def test_leaving_a_running_stream_stops_it_within_one_step(how, moment):
    app, engine, runner = held_app()
    with running_server(app) as url:
        runner.hold()
        client = RawStream(url, "/v1/stream", {"prompt": "leaves early", "max_new_tokens": 20})
        runner.blocked.wait(10)  # the prefill
        made = {"after_headers": 0, "mid_stream": 5, "near_the_end": 18}[moment]
        if made:
            runner.allow(made)
        events = client.read_events(1 + made)
        assert [e.event for e in events] == ["start"] + ["token"] * made
        leave(client, how)
        _wait_closed(url)
        runner.release()
        after = wait_idle(url)
        client.close()
        # the step under way when the client left made one token; then nothing
        assert after["tokens_after_leave"] == 1
        assert after["aborts"]["cancelled"] == 1
        assert after["dropped_events"] == 2  # that token and the engine's finish
        assert "twinstep_wasted_tokens_total 1.0" in httpx.get(url + "/metrics").text
    assert engine.core.is_drained()


@pytest.mark.parametrize("how", HOW)
def test_leaving_after_done_cancels_nothing(how):
    app, engine = tiny_app()
    with running_server(app) as url:
        client = RawStream(url, "/v1/stream", {"prompt": "reads it all", "max_new_tokens": 5})
        assert client.read_to_end()[-1].event == "done"
        leave(client, how)
        client.close()
        after = wait_idle(url)
    assert after["finished"] == {"length": 1} and after["tokens_after_leave"] == 0
    assert engine.core.is_drained()


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40}),
])
def test_leaving_a_non_streaming_request_cancels_it(path, body):
    app, engine, runner = held_app()
    with running_server(app) as url:
        runner.hold()
        client = RawStream(url, path, body)
        runner.blocked.wait(10)  # its prefill is under way
        client.reset()
        _wait_closed(url)
        runner.release()
        after = wait_idle(url)
    assert after["aborts"]["cancelled"] == 1 and after["tokens_after_leave"] == 1
    assert engine.core.is_drained()


def test_many_clients_leaving_at_random_leave_the_pool_whole():
    """30 streams on a batch of 4: some read to the end, the others leave after a
    random number of events by FIN or RST."""
    app, engine = tiny_app(ServeSettings(), max_batch=4)
    rng = random.Random(7)
    plans = [(rng.choice(["end", "fin", "rst"]), rng.randrange(1, 25)) for _ in range(30)]
    finished = {}

    def client(i, how, after):
        stream = RawStream(url, "/v1/stream", {"prompt": f"client {i}", "max_new_tokens": 24})
        events = stream.read_to_end() if how == "end" else stream.read_events(after)
        if how == "end":
            finished[i] = json.loads(events[-1].data)["finish_reason"]
        else:
            leave(stream, how)
        stream.close()

    with running_server(app) as url:
        threads = [threading.Thread(target=client, args=(i, *plan)) for i, plan in enumerate(plans)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        after = wait_idle(url)
    assert list(finished.values()) == ["length"] * sum(1 for how, _ in plans if how == "end")
    total = sum(after["finished"].values())
    assert total == 30 and after["streams_open"] == 0
    assert engine.core.is_drained()
