"""Chaos over a real server with a tiny model: the model raising for one sequence,
for a whole step, in a chunk of a prompt; the step log on a full disk; clients
resetting while their prompt is prefilled; SIGTERM with hundreds of streams open.
After each, every stream has had its last event, every other stream the tokens
it would have had undisturbed, and the server holds nothing: no block, no stream,
no reader."""
import json
import os
import signal
from pathlib import Path

import pytest

from live.client.launch import launched
from live.engine.step_log import StepLog
from live_server import (FaultyRunner, RawStream, ToyTokenizer, culprit, engine_alone,
                         first_run_of_step, held_app, in_chunk, running_server, stats, tiny_app,
                         wait_for, wait_idle)
from analysis_helpers import save_tiny_llama

TOK = ToyTokenizer()
NEW = 10
CHUNKED = dict(max_prefill_tokens=8, chunked_prefill=True)
PROMPTS = {"s0": "the first stream", "s1": "a second one", "s2": "and a third",
           "s3": "x" * 30, "s4": "a longer prompt, " * 4}


def open_streams(url: str, prompts: dict[str, str], new: int = NEW) -> dict[str, RawStream]:
    return {rid: RawStream(url, "/v1/stream", {"prompt": p, "max_new_tokens": new,
                                               "ignore_eos": True}, headers={"X-Request-Id": rid})
            for rid, p in prompts.items()}


def read_all(streams: dict[str, RawStream]) -> dict[str, list]:
    answers = {}
    for rid, stream in streams.items():
        answers[rid] = stream.read_to_end()
        stream.close()
    return answers


def tokens_of(events) -> list[int]:
    return [json.loads(e.data)["token_id"] for e in events if e.event == "token"]


def reason_of(events) -> str:
    assert events[-1].event == "done", [e.event for e in events]
    return json.loads(events[-1].data)["finish_reason"]


def assert_nothing_held(url: str, engine, requests: int) -> None:
    after = wait_idle(url)
    assert after["blocks_reserved"] == 0 and after["blocks_free"] == after["num_blocks"]
    assert after["admissions"] == after["releases"] == requests
    wait_for(lambda: (s := stats(url))["readers"] == 0 and s["streams_open"] == 0,
             what="every stream and reader to be let go")
    assert engine.core.is_drained()


def assert_undisturbed(answers, prompts, **options) -> None:
    for rid, events in answers.items():
        assert reason_of(events) == "length", rid
        assert tokens_of(events) == engine_alone(TOK.encode(prompts[rid]), NEW, **options)[0], rid


@pytest.mark.parametrize("fault", ["one_sequence", "whole_step", "chunk"])
def test_a_model_that_raises_fails_only_its_culprit(fault):
    options = CHUNKED if fault == "chunk" else {}
    prompts = dict(PROMPTS)
    if fault == "chunk":
        prompts["culprit"] = "a prompt that spans several chunks of eight tokens"
        fails = in_chunk("culprit")
    elif fault == "one_sequence":
        prompts["culprit"] = "the culprit"
        fails = culprit("culprit", from_token=4)
    else:
        fails = first_run_of_step(3)
    wrapped = []
    app, engine = tiny_app(runner_wrapper=lambda r: wrapped.append(FaultyRunner(r, fails))
                           or wrapped[0], **options)
    with running_server(app) as url:
        answers = read_all(open_streams(url, prompts))
        assert_nothing_held(url, engine, len(prompts))
    assert wrapped[0].failures >= 1
    if fault != "whole_step":
        events = answers.pop("culprit")
        assert [e.event for e in events[-2:]] == ["error", "done"]
        assert reason_of(events) == "error"
        assert len(tokens_of(events)) == (4 if fault == "one_sequence" else 0)
    assert_undisturbed(answers, prompts, **options)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_step_log_on_a_full_disk_costs_no_stream():
    app, engine = tiny_app()
    # records long enough that 200 steps overflow the file's buffer
    engine.step_log = StepLog("/dev/full", meta={"model": "m" * 500})
    long = {"long": "a", "s0": PROMPTS["s0"]}
    with running_server(app) as url:
        streams = open_streams(url, long, new=200)
        answers = read_all(streams)
        assert_nothing_held(url, engine, len(long))
        after = stats(url)
    assert after["step_log_errors"] >= 1
    for events in answers.values():
        assert reason_of(events) == "length" and len(tokens_of(events)) == 200
    assert engine.step_log.last_step >= 200


@pytest.mark.parametrize("chunked", [False, True], ids=["prefill", "chunk"])
def test_clients_resetting_while_their_prompt_is_prefilled(chunked):
    options = CHUNKED if chunked else {}
    app, engine, runner = held_app(**options)
    with running_server(app) as url:
        steady = open_streams(url, {"steady": PROMPTS["s0"]})
        steady["steady"].read_events(2)  # its first token: it decodes from now on
        runner.hold_and_wait()
        leavers = open_streams(url, {f"gone{i}": "a prompt of some length " * 2 for i in range(3)})
        for leaver in leavers.values():
            leaver.read_events(1)
        runner.allow(1)  # this step plans their prefill (or first chunk), and is held
        for leaver in leavers.values():
            leaver.reset()
        # their cancels are in the inbox before the held step ends
        wait_for(lambda: stats(url)["readers"] == 1, what="the server to notice the resets")
        runner.release()
        answers = read_all(steady)
        # in chunks of 8, the step's budget admits one of them; the others never are
        assert_nothing_held(url, engine, 2 if chunked else 4)
        after = stats(url)
    assert after["aborts"]["cancelled"] == 3
    assert_undisturbed(answers, {"steady": PROMPTS["s0"]}, **options)


def test_sigterm_with_hundreds_of_streams_open_ends_every_one(smollm2, tmp_path):
    streams_open = 500
    model = save_tiny_llama(tmp_path / "model", smollm2.tokenizer)
    log = tmp_path / "serve.log"
    args = ["--model", str(model), "--num-blocks", "4096", "--max-batch", "64",
            "--max-waiting", str(streams_open), "--threads", "1"]
    with launched(args, log=log, stop_signal=signal.SIGTERM, grace_s=60,
                  cwd=Path(__file__).resolve().parents[2]) as server:
        clients = [RawStream(server.url, "/v1/stream",
                             {"prompt": f"stream {i}", "max_new_tokens": 200, "ignore_eos": True})
                   for i in range(streams_open)]
        for client in clients:
            assert client.read_head() == 200
        clients[0].read_events(3)  # generating
        server.process.send_signal(signal.SIGTERM)
        reasons = set()
        for client in clients:
            reasons.add(reason_of(client.read_to_end()))
            client.close()
        assert server.process.wait(60) == 0
    output = log.read_text()
    assert reasons <= {"cancelled", "length"} and "cancelled" in reasons
    assert "still held streams" not in output and "Traceback" not in output
