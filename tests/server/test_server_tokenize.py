"""A long text prompt (a body over `INLINE_BODY_BYTES`) is tokenized off the event
loop, so every other stream keeps being written meanwhile, and a short one on it,
where it costs less than the hop to a worker thread; a prompt of token ids, however
long, is checked on the loop, in the order the requests came; and a prompt with
more characters than the context could hold is refused before the tokenizer sees it."""
import json
import threading

import httpx

from live_server import (TOY_CONTEXT, TOY_NAME, HeldRunner, RawStream, ToyTokenizer,
                         running_server, tiny_engine, wait_idle)
from live.server.app import create_app
from live.server.routes_generate import INLINE_BODY_BYTES
from live.server.validation import ServedModel
from scheduler.settings import ServeSettings
from tiny_models import VOCAB
from wire_apis import openai_error

GATED_CHARS = 1000
"""Prompts this long wait inside the tokenizer until the test lets them go."""


class GatedTokenizer(ToyTokenizer):
    def __init__(self):
        self.entered = threading.Event()
        self.proceed = threading.Event()
        self.let_go_in_time: bool | None = None
        self.lengths: list[int] = []
        self.threads: dict[int, str] = {}
        """The thread each length of prompt was tokenized on."""

    def encode(self, text: str) -> list[int]:
        self.lengths.append(len(text))
        self.threads[len(text)] = threading.current_thread().name
        if len(text) >= GATED_CHARS:
            self.entered.set()
            # set only by the test, after another stream's events reached it
            self.let_go_in_time = self.proceed.wait(10)
        return super().encode(text)


class ThreadNoting(ServedModel):
    """Notes the thread each list of token ids was checked on."""

    def token_ids(self, value, param: str) -> list[int]:
        NOTED_THREADS.append((len(value), threading.current_thread().name))
        return super().token_ids(value, param)


NOTED_THREADS: list[tuple[int, str]] = []


def _server():
    held: list[HeldRunner] = []

    def wrap(runner):
        held.append(HeldRunner(runner))
        return held[0]
    engine, _ = tiny_engine(runner_wrapper=wrap)
    tokenizer = GatedTokenizer()
    app = create_app(engine, ServedModel(TOY_NAME, tokenizer, TOY_CONTEXT, VOCAB),
                     ServeSettings())
    return app, engine, held[0], tokenizer


def test_a_stream_keeps_its_events_coming_while_a_long_prompt_is_tokenized():
    app, engine, runner, tokenizer = _server()
    with running_server(app) as url:
        other = RawStream(url, "/v1/stream", {"prompt": "others", "max_new_tokens": 20})
        other.read_events(2)
        runner.hold_and_wait()
        answers = []
        poster = threading.Thread(target=lambda: answers.append(httpx.post(
            url + "/v1/completions", json={"prompt": "y" * 2000, "max_tokens": 2}, timeout=60)))
        poster.start()
        assert tokenizer.entered.wait(20)
        runner.allow(3)
        seen = len(other.events)
        other.read_events(3)  # written while the long prompt is still inside the tokenizer
        assert len(other.events) >= seen + 3
        tokenizer.proceed.set()
        poster.join(60)
        assert tokenizer.let_go_in_time is True
        assert answers[0].status_code == 422
        assert openai_error(answers[0].json())["code"] == "context_length_exceeded"
        # the short prompt on the loop's thread (the server's), the long one elsewhere
        loop_thread = tokenizer.threads[len("others")]
        assert loop_thread.startswith("uvicorn-") and tokenizer.threads[2000] != loop_thread
        runner.release()
        assert json.loads(other.read_to_end()[-1].data)["finish_reason"] == "length"
        other.close()
        after = wait_idle(url)
        assert after["blocks_reserved"] == 0 and after["admissions"] == after["releases"]
    assert engine.core.is_drained()


def test_a_prompt_longer_than_any_context_is_refused_without_tokenizing():
    app, engine, _, tokenizer = _server()
    with running_server(app) as url:
        for path, body in (("/v1/completions", {"prompt": "z" * 1_000_000}),
                           ("/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "z" * 1_000_000}]})):
            r = httpx.post(url + path, json=body, timeout=60)
            assert r.status_code == 422, r.text
            error = openai_error(r.json())
            assert error["code"] == "context_length_exceeded" and "characters" in error["message"]
        assert all(length < 1_000_000 for length in tokenizer.lengths)
        wait_idle(url)
    assert engine.core.is_drained()


def test_a_long_prompt_of_token_ids_is_checked_on_the_event_loop():
    NOTED_THREADS.clear()
    engine, _ = tiny_engine()
    app = create_app(engine, ThreadNoting(TOY_NAME, ToyTokenizer(), TOY_CONTEXT, VOCAB),
                     ServeSettings())
    ids = [100 + i % (VOCAB - 100) for i in range(250)]
    with running_server(app) as url:
        for path, body in (("/v1/stream", {"prompt_tokens": ids, "max_new_tokens": 2}),
                           ("/v1/completions", {"prompt": ids, "max_tokens": 2}),
                           ("/v1/completions", {"prompt": [ids], "max_tokens": 2})):
            assert len(json.dumps(body)) > INLINE_BODY_BYTES
            r = httpx.post(url + path, json=body, timeout=60)
            assert r.status_code == 200, r.text
            usage = (json.loads(r.text.split("event: done\ndata: ")[1].split("\n")[0])["usage"]
                     if path == "/v1/stream" else r.json()["usage"])
            assert usage["prompt_tokens"] == 250 and usage["completion_tokens"] == 2
        after = wait_idle(url)
        assert after["blocks_reserved"] == 0 and after["admissions"] == after["releases"] == 3
    assert [length for length, _ in NOTED_THREADS] == [250, 250, 250]
    assert all(thread.startswith("uvicorn-") for _, thread in NOTED_THREADS), NOTED_THREADS
    assert engine.core.is_drained()
