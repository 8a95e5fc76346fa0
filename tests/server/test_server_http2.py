"""The server with `http2`: many streams multiplexed on one cleartext HTTP/2
connection (h2c with prior knowledge) carry the engine's own tokens; a stream the
client resets (RST_STREAM), or a connection it drops, is cancelled in the engine
within a step while its siblings go on; HTTP/1.1 clients are served on the same
port; a graceful shutdown ends the streams of an open connection with their last
event.

httpx (httpcore 1.0) closes an HTTP/2 response early without sending RST_STREAM,
so the server never hears of it; the tests that leave speak HTTP/2 themselves,
with the `h2` state machine over a plain socket."""
import asyncio
import json
import signal
import socket

import httpx
import pytest

from h2_client import H2Client
from scheduler.settings import ServeSettings
from live.client.sse_parser import SSEEvent, SSEParser
from live_server import (PacedRunner, RawStream, ServerThread, ToyTokenizer, engine_alone,
                         held_app, running_server, serve_command, stats, tiny_app, wait_for,
                         wait_idle)
from tiny_models import tiny_llama

TOK = ToyTokenizer()
HTTP2 = ServeSettings(http2=True)


def h2_connections(running: ServerThread) -> list:
    """The server's open HTTP/2 connections (protocols that hold streams)."""
    return [c for c in running.server.server_state.connections if hasattr(c, "cycles")]


def token_ids(events: list[SSEEvent]) -> list[int]:
    return [json.loads(e.data)["token_id"] for e in events if e.event == "token"]


class Following:
    """An open streaming response, its events parsed as they are read."""

    def __init__(self, response: httpx.Response):
        self.response = response
        self._chunks = response.aiter_bytes()
        self._parser = SSEParser()
        self.events: list[SSEEvent] = []

    async def read_events(self, count: int) -> list[SSEEvent]:
        while len(self.events) < count:
            chunk = await anext(self._chunks)
            self.events += [e for e in self._parser.feed(chunk) if isinstance(e, SSEEvent)]
        return self.events

    async def read_to_end(self) -> list[SSEEvent]:
        async for chunk in self._chunks:
            self.events += [e for e in self._parser.feed(chunk) if isinstance(e, SSEEvent)]
        return self.events


async def _sixteen_streams(running: ServerThread, runner, bodies: list[dict]):
    async with httpx.AsyncClient(base_url=running.base_url, http1=False, http2=True,
                                 timeout=60) as client:
        runner.hold()
        responses = await asyncio.gather(*(
            client.send(client.build_request("POST", "/v1/stream", json=body), stream=True)
            for body in bodies))
        streams = [Following(r) for r in responses]
        for stream in streams:  # every stream has started while no step has run
            assert [e.event for e in await stream.read_events(1)] == ["start"]
        held = (await client.get("/stats")).json()
        connections = h2_connections(running)
        # the /stats request went over the same connection and may not have ended yet
        seen = [(sum(cycle.scope["path"] == "/v1/stream" for cycle in list(c.cycles.values())),
                 c.client[1],
                 c.transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP,
                                                                 socket.TCP_NODELAY))
                for c in connections]
        runner.release()
        events = await asyncio.gather(*(s.read_to_end() for s in streams))
        for r in responses:
            await r.aclose()
        answers = [(await client.post("/v1/completions", json={
            "prompt": body["prompt"], "max_tokens": body["max_new_tokens"], "temperature": 0,
        })) for body in bodies]
        still = [c.client[1] for c in h2_connections(running)]
    return responses, held, seen, events, answers, still


def test_sixteen_streams_multiplexed_on_one_connection_carry_the_engines_tokens():
    app, engine, runner = held_app(HTTP2, max_batch=8)
    bodies = [{"prompt": f"stream {i} over h2:", "max_new_tokens": 4 + i % 5} for i in range(16)]
    with ServerThread(app) as running:
        responses, held, seen, events, answers, still = asyncio.run(
            _sixteen_streams(running, runner, bodies))
        after = wait_idle(running.base_url)
    assert all(r.http_version == "HTTP/2" for r in responses + answers)
    assert held["streams_open"] == 16
    # one connection on the server, holding all sixteen streams at once, from one
    # client port; the non-streaming answers came on that same connection after
    [(streams_on_it, client_port, nodelay)] = seen
    assert streams_on_it == 16
    assert nodelay
    assert still == [client_port]
    for body, stream_events, answer in zip(bodies, events, answers):
        n = body["max_new_tokens"]
        assert [e.event for e in stream_events] == ["start"] + ["token"] * n + ["done"]
        tokens, text, _ = engine_alone(TOK.encode(body["prompt"]), n)
        assert token_ids(stream_events) == tokens
        streamed = "".join(json.loads(e.data)["text"] for e in stream_events[1:-1])
        assert streamed == text == answer.json()["choices"][0]["text"]
    assert after["finished"] == {"length": 32}
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


@pytest.mark.parametrize("moment", [0, 5])
def test_a_reset_stream_is_cancelled_within_a_step_and_its_sibling_goes_on(moment):
    app, engine, runner = held_app(HTTP2)
    leaver_prompt, sibling_prompt = "leaves over h2", "stays on the connection"
    with ServerThread(app) as running:
        url = running.base_url
        client = H2Client(url)
        runner.hold()
        leaver = client.post("/v1/stream", {"prompt": leaver_prompt, "max_new_tokens": 20})
        runner.blocked.wait(10)  # its prefill
        sibling = client.post("/v1/stream", {"prompt": sibling_prompt, "max_new_tokens": 30})
        client.read_events(sibling, 1)  # submitted: it joins at the next step
        if moment:
            runner.allow(moment)
        events = client.read_events(leaver, 1 + moment)
        assert [e.event for e in events] == ["start"] + ["token"] * moment
        client.reset(leaver)
        wait_for(lambda: stats(url)["streams_open"] == 1, what="the hub to close the stream")
        runner.release()
        sibling_body = client.read_to_end(sibling)
        after = wait_idle(url)
        client.drop()
    assert client.status == {leaver: 200, sibling: 200}
    sibling_events = [e for e in SSEParser().feed(sibling_body) if isinstance(e, SSEEvent)]
    assert token_ids(sibling_events) == engine_alone(TOK.encode(sibling_prompt), 30)[0]
    assert json.loads(sibling_events[-1].data)["finish_reason"] == "length"
    # the step under way when the reset came made one token; then nothing
    assert after["tokens_after_leave"] == 1
    assert after["aborts"]["cancelled"] == 1
    assert after["finished"] == {"length": 1, "cancelled": 1}
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


def test_a_reset_non_streaming_request_is_cancelled():
    app, engine, runner = held_app(HTTP2)
    with ServerThread(app) as running:
        client = H2Client(running.base_url)
        runner.hold()
        stream_id = client.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40})
        runner.blocked.wait(10)  # its prefill is under way
        client.reset(stream_id)
        wait_for(lambda: stats(running.base_url)["streams_open"] == 0,
                 what="the hub to close the stream")
        runner.release()
        after = wait_idle(running.base_url)
        client.drop()
    assert after["aborts"]["cancelled"] == 1 and after["tokens_after_leave"] == 1
    assert engine.core.is_drained()


def test_dropping_the_connection_cancels_every_stream_on_it():
    app, engine, runner = held_app(HTTP2)
    with ServerThread(app) as running:
        url = running.base_url
        client = H2Client(url)
        runner.hold()
        ids = [client.post("/v1/stream", {"prompt": f"one of four {i}", "max_new_tokens": 25})
               for i in range(4)]
        for stream_id in ids:
            client.read_events(stream_id, 1)
        runner.allow(3)
        client.drop()
        wait_for(lambda: stats(url)["streams_open"] == 0, what="the hub to close the streams")
        runner.release()
        after = wait_idle(url)
    assert after["aborts"]["cancelled"] == 4 and after["finished"] == {"cancelled": 4}
    assert after["tokens_after_leave"] <= 4  # at most the one step under way
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()


def test_graceful_shutdown_ends_the_streams_of_an_http2_connection_with_a_last_event():
    app, engine = tiny_app(HTTP2, runner_wrapper=lambda r: PacedRunner(r, 0.01), num_blocks=512)
    with ServerThread(app) as running:
        client = H2Client(running.base_url)
        ids = [client.post("/v1/stream", {"prompt": f"long {i}", "max_new_tokens": 200})
               for i in range(3)]
        for stream_id in ids:
            client.read_events(stream_id, 3)
        running.stop()
    for stream_id in ids:
        events = [e for e in SSEParser().feed(client.read_to_end(stream_id))
                  if isinstance(e, SSEEvent)]
        done = json.loads(events[-1].data)
        assert done["finish_reason"] == "cancelled" and done["usage"]["completion_tokens"] > 0
    client.drop()
    assert engine.core.is_drained()


def test_http1_clients_are_served_on_the_same_port():
    app, engine, runner = held_app(HTTP2)
    body = {"prompt": "an HTTP/1.1 client", "max_new_tokens": 6}
    with ServerThread(app) as running:
        url = running.base_url
        with httpx.stream("POST", url + "/v1/stream", json=body, timeout=30) as r:
            version, raw = r.http_version, r.read()
        events = [e for e in SSEParser().feed(raw) if isinstance(e, SSEEvent)]
        # and its disconnect reaches the engine as on HTTP/2
        runner.hold()
        leaver = RawStream(url, "/v1/stream", {"prompt": "leaves over h1", "max_new_tokens": 20})
        runner.blocked.wait(10)
        runner.allow(2)
        leaver.read_events(3)
        leaver.reset()
        wait_for(lambda: stats(url)["streams_open"] == 0, what="the hub to close the stream")
        runner.release()
        after = wait_idle(url)
    assert version == "HTTP/1.1"
    assert token_ids(events) == engine_alone(TOK.encode(body["prompt"]), 6)[0]
    assert after["tokens_after_leave"] == 1 and after["aborts"]["cancelled"] == 1
    assert engine.core.is_drained()


async def _one_stream_each_way(url: str) -> list[tuple[str, list[SSEEvent]]]:
    body = {"prompt": "Hello", "max_new_tokens": 3, "ignore_eos": True}
    answers = []
    for http1, http2 in ((False, True), (True, False)):
        async with httpx.AsyncClient(http1=http1, http2=http2, timeout=60) as client:
            response = await client.post(url + "/v1/stream", json=body)
            events = [e for e in SSEParser().feed(response.content) if isinstance(e, SSEEvent)]
            answers.append((response.http_version, events))
    return answers


def test_python_m_live_serve_http2_speaks_both_versions(tmp_path, smollm2):
    model = tiny_llama(vocab_size=len(smollm2.tokenizer))
    model.save_pretrained(tmp_path)
    smollm2.tokenizer.save_pretrained(tmp_path)
    with serve_command("--model", str(tmp_path), "--http2", "--num-blocks", "64") as (process, url):
        answers = asyncio.run(_one_stream_each_way(url))
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    assert [version for version, _ in answers] == ["HTTP/2", "HTTP/1.1"]
    for _, events in answers:
        assert [e.event for e in events] == ["start", "token", "token", "token", "done"]
    assert token_ids(answers[0][1]) == token_ids(answers[1][1])  # greedy: the same answer
    assert '"http2": true' in process.stdout.read()


def test_a_stalled_http2_reader_is_paused_and_resumes_when_it_reads():
    # Events padded well past the client's 64 KiB window: a reader that grants no
    # credit backs up into its stream's queue, as over HTTP/1.1 when the socket fills.
    app, engine = tiny_app(ServeSettings(http2=True, policy="pause", max_queued=4,
                                         event_padding=256 * 1024))
    prompt = "stalled over h2"
    with running_server(app) as url:
        client = H2Client(url)
        stream_id = client.post("/v1/stream", {"prompt": prompt, "max_new_tokens": 40})
        paused = wait_for(lambda: (s := stats(url))["paused"] == 1 and s, what="the pause")
        assert paused["blocks_reserved"] > 0 and paused["finished"] == {}
        client.read_to_end(stream_id)
        after = wait_idle(url)
    tokens, text, _ = engine_alone(TOK.encode(prompt), 40)
    events = client.events[stream_id]
    assert [e.event for e in events] == ["start"] + ["token"] * 40 + ["done"]
    assert token_ids(events) == tokens
    assert after["finished"] == {"length": 1} and after["paused"] == 0
    assert after["blocks_free"] == after["num_blocks"]
    assert engine.core.is_drained()
