"""The engine in a process of its own (`--engine-process`): the same answers,
refusals, records and pool as an engine in the server's thread; a crash there ends
the streams in flight with an error and another engine takes new requests behind
the same socket."""
import asyncio
import functools
import json
import signal
import time

import httpx

from live.engine.engine_process import EngineProcess
from live.server.app import create_app
from scheduler.settings import ServeSettings
from live_server import (CrashingRunner, PacedRunner, RawStream, engine_alone, running_server,
                         serve_command, stats, steady, tiny_engine, wait_for, wait_idle)
from tiny_models import tiny_llama

KEYS = ("alice:alice-secret-1",)
ALICE = {"Authorization": "Bearer alice-secret-1"}
ADMIN = {"Authorization": "Bearer admin-secret-9"}


def engine_process(gated: bool = False, step_s: float = 0.0, wrapper=PacedRunner, **options):
    build = functools.partial(tiny_engine, runner_wrapper=functools.partial(wrapper, step_s=step_s),
                              **options)
    return EngineProcess(build, "cpu", gated)


def token_ids(events) -> list[int]:
    return [json.loads(e.data)["token_id"] for e in events if e.event == "token"]


def test_streams_refusals_and_records_through_an_engine_process():
    engine = engine_process(step_s=0.02, max_streams_per_key=2)
    settings = ServeSettings(api_key=KEYS, admin_key="admin-secret-9")
    prompts = ["the first", "a second, longer prompt", "3"]
    with running_server(create_app(engine, engine.served, settings)) as url:
        streams = [RawStream(url, "/v1/stream", {"prompt": p, "max_new_tokens": 12},
                             headers=ALICE) for p in prompts[:2]]
        for stream in streams:
            assert stream.read_head() == 200
            stream.read_events(2)
        # what the core refuses crosses the process before the first byte
        refused = httpx.post(url + "/v1/stream", headers=ALICE,
                             json={"prompt": prompts[2], "max_new_tokens": 12})
        assert refused.status_code == 429
        assert "'alice' holds 2 streams" in refused.json()["error"]["message"]
        too_long = httpx.post(url + "/v1/stream", headers=ALICE,
                              json={"prompt": "x" * 250, "max_new_tokens": 12})
        assert too_long.status_code == 422
        answers = [stream.read_to_end() for stream in streams]
        third = RawStream(url, "/v1/stream", {"prompt": prompts[2], "max_new_tokens": 12},
                          headers=ALICE)
        answers.append(third.read_to_end())
        for stream in streams + [third]:
            stream.close()
        end = wait_idle(url, ADMIN)
        steps = httpx.get(url + "/v1/steps", headers=ADMIN).text.splitlines()
        described = httpx.get(url + "/v1/engine", headers=ADMIN).json()
        finished = httpx.get(url + "/v1/requests", headers=ADMIN).text.splitlines()
    for prompt, events in zip(prompts, answers):
        expected, text, _ = engine_alone([ord(c) for c in prompt], 12)
        assert token_ids(events) == expected
        assert [e.event for e in events][-1] == "done"
        assert json.loads(events[-1].data)["finish_reason"] == "length"
    assert end["blocks_free"] == end["num_blocks"] == 128 and end["engine_starts"] == 1
    assert end["admissions"] == end["releases"] == 3 and end["finished"] == {"length": 3}
    assert described["scheduler"]["max_streams_per_key"] == 2
    assert described["steps"]["last"] == len(steps) > 12
    assert [json.loads(line)["step"] for line in steps] == list(range(1, len(steps) + 1))
    assert len(finished) == 3


def test_a_client_that_leaves_cancels_in_the_engine_process():
    engine = engine_process(step_s=0.02)
    with running_server(create_app(engine, engine.served, ServeSettings())) as url:
        stream = RawStream(url, "/v1/stream", {"prompt": "leave", "max_new_tokens": 200},
                           headers={"X-Request-Id": "gone"})
        stream.read_events(4)
        stream.reset()
        end = wait_idle(url)
        records = [json.loads(line) for line in httpx.get(url + "/v1/requests").text.splitlines()]
    (gone,) = records
    assert gone["finish_reason"] == "cancelled" and 3 <= gone["completion_tokens"] < 200
    assert end["blocks_free"] == end["num_blocks"] and end["aborts"]["cancelled"] == 1


def test_a_crashed_engine_ends_its_streams_and_another_takes_new_requests():
    engine = engine_process(step_s=0.02, wrapper=CrashingRunner)
    with running_server(create_app(engine, engine.served, ServeSettings())) as url:
        running = RawStream(url, "/v1/stream", {"prompt": "long", "max_new_tokens": 200})
        running.read_events(3)
        crashing = RawStream(url, "/v1/stream", {"prompt": "~", "max_new_tokens": 5})
        assert crashing.read_head() == 200
        ends = [running.read_to_end(), crashing.read_to_end()]
        wait_for(lambda: httpx.get(url + "/health").json()["status"] == "ok",
                 what="another engine")
        after = RawStream(url, "/v1/stream", {"prompt": "again", "max_new_tokens": 6}).read_to_end()
        end = wait_idle(url)
    for events in ends:
        assert [e.event for e in events][-2:] == ["error", "done"]
        assert json.loads(events[-1].data)["finish_reason"] == "error"
    assert token_ids(after) == engine_alone([ord(c) for c in "again"], 6)[0]
    assert end["engine_starts"] == 2 and end["engine_stopped"] is False
    # the new engine holds nothing of the old one's
    assert end["blocks_free"] == end["num_blocks"] and end["admissions"] == 1


def test_the_naive_gate_holds_an_engine_process_for_its_readers():
    # events padded so that a reader's small socket is full after a few: under naive
    # the engine's process takes no step while one of them waits to be written
    engine = engine_process(gated=True)
    settings = ServeSettings(policy="naive", event_padding=256 * 1024)
    with running_server(create_app(engine, engine.served, settings)) as url:
        slow = RawStream(url, "/v1/stream", {"prompt": "one", "max_new_tokens": 20},
                         recv_buffer=4096)
        assert slow.read_head() == 200
        held = steady(url, lambda s: s["engine_waiting_for_readers"])
        time.sleep(0.3)
        assert stats(url)["step"] == held["step"] < 20
        answer = slow.read_to_end()
        end = wait_idle(url)
    assert token_ids(answer) == engine_alone([ord(c) for c in "one"], 20)[0]
    assert end["blocks_free"] == end["num_blocks"] and end["engine_waiting_for_readers"] is False


def test_python_m_live_serve_engine_process(tmp_path, smollm2):
    model = tiny_llama(vocab_size=len(smollm2.tokenizer))
    model.save_pretrained(tmp_path)
    smollm2.tokenizer.save_pretrained(tmp_path)
    steps = tmp_path / "steps.jsonl"
    with serve_command("--model", str(tmp_path), "--engine-process", "--num-blocks", "64",
                       "--step-log", str(steps)) as (process, url):
        client = RawStream(url, "/v1/stream", {"prompt": "Count to a thousand:",
                                               "max_new_tokens": 200, "ignore_eos": True})
        client.read_events(3)
        process.send_signal(signal.SIGTERM)
        done = json.loads(client.read_to_end()[-1].data)
        client.close()
        assert process.wait(60) == 0
    assert done["finish_reason"] == "cancelled"
    assert '"engine_process": true' in process.stdout.read()
    records = [json.loads(line) for line in steps.read_text().splitlines()]
    assert records and all("duration_s" in r for r in records)


def test_a_burst_of_requests_crosses_to_the_engine_process_while_its_steps_come_back():
    # more submits than the socket between the processes holds, while the steps'
    # outputs come back: a loop that blocked sending would never read again, and the
    # engine, blocked sending to it, would never read the submits
    engine = engine_process(num_blocks=65536, max_batch=512, max_waiting=1024)
    prompts = [chr(33 + n % 90) * 200 for n in range(800)]

    async def burst(url):
        limits = httpx.Limits(max_connections=len(prompts))  # no connection reused
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
            return await asyncio.gather(*[
                client.post("/v1/completions", json={"prompt": p, "max_tokens": 40})
                for p in prompts])

    with running_server(create_app(engine, engine.served, ServeSettings())) as url:
        answers = asyncio.run(burst(url))
        end = wait_idle(url)
    assert [a.status_code for a in answers] == [200] * len(prompts)
    assert {a.json()["usage"]["completion_tokens"] for a in answers} == {40}
    assert end["admissions"] == end["releases"] == len(prompts)
    assert end["blocks_free"] == end["num_blocks"]
