"""A real uvicorn server on 127.0.0.1, on a free port, in a background thread:
`with running_server(app_or_settings) as base_url: ...` starts it and stops it
(gracefully, as SIGTERM would) when the block ends.

Also engines for server tests: tiny random models behind a toy tokenizer (one
token per ASCII character), and a runner wrapper that lets a test hold the engine
between steps."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from collections.abc import Iterator

import httpx
from starlette.applications import Starlette

from engine_helpers import run_engine
from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from live.runner.params import SamplingParams
from scheduler.settings import ServeSettings
from live.serve import build_engine
from live.server.app import create_app
from live.server.uvicorn_server import LiveServer
from live.client.launch import launched
from live.client.sse_parser import Comment, SSEEvent, SSEParser
from live.server.validation import ServedModel
from scheduler import FinishEvent, SchedulerConfig
from tiny_models import VOCAB, tiny_llama

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@contextlib.contextmanager
def running_server(app_or_settings: Starlette | ServeSettings) -> Iterator[str]:
    """The base URL of a server running `app_or_settings` (an app from `create_app`,
    or settings to build one from, loading the model they name)."""
    with ServerThread(app_or_settings) as server:
        yield server.base_url


class ServerThread:
    """`running_server` with the uvicorn server at hand (`.server`)."""

    def __init__(self, app_or_settings: Starlette | ServeSettings):
        app = app_or_settings
        if isinstance(app, ServeSettings):
            app = create_app(*build_engine(app), app)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.server = LiveServer(app, "127.0.0.1", port, log_level="warning")
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]},
                                        name=f"uvicorn-{port}", daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server at {self.base_url} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """As SIGTERM does: streams get their last event, the engine lets go, uvicorn exits."""
        self.server.handle_exit(signal.SIGTERM, None)
        self._thread.join(STOP_TIMEOUT_S)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError(f"the server at {self.base_url} did not stop")


class ToyTokenizer:
    """One token per ASCII character (ids 0-127, the tiny models' vocabulary), and
    a plain chat template."""

    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return [ord(c) if ord(c) < VOCAB else ord("?") for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True,
                            tokenize: bool = True):
        text = "".join(f"<{m['role']}>{m['content']}\n" for m in messages)
        text += "<assistant>" if add_generation_prompt else ""
        return self.encode(text) if tokenize else text


TOY_NAME = "tiny-llama"
TOY_CONTEXT = 256


def tiny_engine(model=None, *, num_blocks: int = 128, block_size: int = 4, max_batch: int = 8,
                max_waiting: int = 64, eos: frozenset[int] = frozenset(),
                runner_wrapper=None, **scheduling) -> tuple[Engine, ServedModel]:
    """An engine on a tiny random Llama (or `model`) with the toy tokenizer; `eos`
    makes those ids end a generation; `scheduling`: other `SchedulerConfig` fields."""
    model = model if model is not None else tiny_llama()
    runner = ModelRunner(model, num_blocks=num_blocks, block_size=block_size)
    runner.eos_token_ids = frozenset(eos)
    if runner_wrapper is not None:
        runner = runner_wrapper(runner)
    tokenizer = ToyTokenizer()
    config = SchedulerConfig(num_blocks=num_blocks, block_size=block_size, max_batch=max_batch,
                             max_waiting=max_waiting, max_model_len=TOY_CONTEXT, **scheduling)
    return (Engine(runner, tokenizer, config),
            ServedModel(TOY_NAME, tokenizer, TOY_CONTEXT, model.config.vocab_size))


def tiny_app(settings: ServeSettings | None = None, **engine_options) -> tuple[Starlette, Engine]:
    engine, served = tiny_engine(**engine_options)
    return create_app(engine, served, settings or ServeSettings()), engine


class HeldRunner:
    """Wraps a runner so that a test decides when steps run: while held, the step
    loop blocks inside `execute` (after planning, before the model runs), where the
    core's state stands still and may be read from the test's thread."""

    def __init__(self, runner):
        self.runner = runner
        self.eos_token_ids = runner.eos_token_ids
        self.vocab_size = runner.vocab_size
        self._cond = threading.Condition()
        self._allowed: int | None = None  # steps let through while held; None: not held
        self.blocked = threading.Event()
        """Set while a step waits to run."""
        self.steps = 0
        self.prefilled: list[str] = []
        """Every sequence ever admitted, in order."""

    def hold(self) -> None:
        with self._cond:
            self._allowed = 0

    def hold_and_wait(self, timeout: float = 10.0) -> None:
        """Hold, and return once a step is blocked."""
        self.hold()
        if not self.blocked.wait(timeout):
            raise AssertionError("no step came to be held")

    def let(self, steps: int = 1) -> int:
        """Let `steps` more steps run, then hold again; returns at once, with the
        count of steps that will have run by then."""
        with self._cond:
            self.blocked.clear()
            self._allowed += steps
            self._cond.notify_all()
            return self.steps + steps

    def allow(self, steps: int = 1) -> None:
        """`let` the steps run; returns once they ran and the next one is blocked."""
        target = self.let(steps)
        with self._cond:
            self._cond.wait_for(lambda: self.steps >= target, timeout=10)
        if not self.blocked.wait(10):
            raise AssertionError("no step came to be held")

    def release(self) -> None:
        with self._cond:
            self._allowed = None
            self._cond.notify_all()

    def execute(self, plan) -> list[int]:
        with self._cond:
            while self._allowed == 0:
                self.blocked.set()
                self._cond.wait()
            self.blocked.clear()
            if self._allowed is not None:
                self._allowed -= 1
            self.steps += 1
            self.prefilled += [seq.id for seq in plan.prefills]
            self._cond.notify_all()
        return self.runner.execute(plan)

    def forget(self, seq_id: str) -> None:
        self.runner.forget(seq_id)


class PacedRunner:
    """Wraps a runner so that every step takes at least `step_s`: a tiny model then
    generates for as long as a test needs a stream to be still running."""

    def __init__(self, runner, step_s: float):
        self.runner = runner
        self.step_s = step_s
        self.eos_token_ids = runner.eos_token_ids
        self.vocab_size = runner.vocab_size

    def execute(self, plan) -> list[int]:
        time.sleep(self.step_s)
        return self.runner.execute(plan)

    def forget(self, seq_id: str) -> None:
        self.runner.forget(seq_id)


class CrashingRunner(PacedRunner):
    """A `PacedRunner` whose process dies, as if the model segfaulted, at the step
    that would prefill a prompt holding the token `CRASH`: for engines in a process
    of their own."""

    CRASH = ord("~")

    def execute(self, plan) -> list[int]:
        if any(self.CRASH in seq.request.payload.prompt_ids for seq in plan.prefills):
            os._exit(70)
        return super().execute(plan)


def held_app(settings: ServeSettings | None = None, **engine_options):
    """`tiny_app` with a `HeldRunner`: (app, engine, runner)."""
    held: list[HeldRunner] = []

    def wrap(runner):
        held.append(HeldRunner(runner))
        return held[0]
    app, engine = tiny_app(settings, runner_wrapper=wrap, **engine_options)
    return app, engine, held[0]


_reference_engines: dict[tuple, Engine] = {}


def engine_alone(prompt_ids: list[int], max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
                 **engine_options) -> tuple[list[int], str, FinishEvent]:
    """What an engine makes for one request with nothing else running: the
    reference a server's answer must equal."""
    key = tuple(sorted(engine_options.items()))
    engine = _reference_engines.get(key)
    if engine is None:
        engine = _reference_engines[key] = tiny_engine(**engine_options)[0]
    tokens, texts, finished = run_engine(engine, {0: [("ref", prompt_ids, max_new_tokens, sampling)]})
    assert engine.core.is_drained()
    return tokens.get("ref", []), texts.get("ref", ""), finished["ref"]


class RawStream:
    """One HTTP/1.1 request over a plain socket, read only when the test asks, so
    that a reader can stall for real (its TCP window fills) and leave exactly as a
    test says: FIN (`finish`) or RST (`reset`)."""

    def __init__(self, base_url: str, path: str, body: dict | None = None, method: str = "POST",
                 headers: dict[str, str] | None = None, recv_buffer: int | None = None):
        host, port = base_url.removeprefix("http://").split(":")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer is not None:  # before connect, so the window starts small
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        self.sock.settimeout(30)
        self.sock.connect((host, int(port)))
        payload = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: text/event-stream"]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        self._raw = b""
        self._body = b""
        self._parser = SSEParser()
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.events: list[SSEEvent] = []
        self.comments: list[str] = []
        self.ended = False

    def read_head(self) -> int:
        while b"\r\n\r\n" not in self._raw:
            self._recv()
        head, self._raw = self._raw.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        return self.status

    def read_events(self, count: int) -> list[SSEEvent]:
        """Read until `count` more events have come (or the body ends)."""
        if self.status is None:
            self.read_head()
        want = len(self.events) + count
        self._dechunk()  # what came with the head
        while len(self.events) < want and not self.ended:
            self._recv()
            self._dechunk()
        return self.events

    def read_to_end(self) -> list[SSEEvent]:
        return self.read_events(10 ** 9)

    def read_slowly(self, chunk: int, pause_s: float) -> list[SSEEvent]:
        """Read to the end at most `chunk` bytes at a time, `pause_s` apart: a reader
        slower than the server writes, but never stalled."""
        if self.status is None:
            self.read_head()
        self._dechunk()
        while not self.ended:
            time.sleep(pause_s)
            self._recv(chunk)
            self._dechunk()
        return self.events

    def read_until_comment(self, text: str) -> None:
        if self.status is None:
            self.read_head()
        self._dechunk()
        while text not in self.comments and not self.ended:
            self._recv()
            self._dechunk()

    def finish(self) -> None:
        """Leave with a FIN: no more to send, the socket kept until `close`."""
        self.sock.shutdown(socket.SHUT_WR)

    def reset(self) -> None:
        """Leave with an RST: SO_LINGER 0, then close."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()

    def _recv(self, size: int = 65536) -> None:
        data = self.sock.recv(size)
        if not data:
            self.ended = True
            raise ConnectionError("the server closed the connection")
        self._raw += data

    def _dechunk(self) -> None:
        while b"\r\n" in self._raw:
            size_line, rest = self._raw.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if len(rest) < size + 2:
                return
            self._feed(rest[:size])
            self._raw = rest[size + 2:]
            if size == 0:
                self.ended = True
                return

    def _feed(self, data: bytes) -> None:
        self._body += data
        for item in self._parser.feed(data):
            if isinstance(item, Comment):
                self.comments.append(item.text)
            else:
                self.events.append(item)


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.01, what: str = "condition"):
    """Poll until `predicate()` is truthy (returning it), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def stats(base_url: str, headers: dict | None = None) -> dict:
    """/stats (`headers`: the admin key's, on a server with keys)."""
    return httpx.get(f"{base_url}/stats", headers=headers).json()


def steady(url: str, predicate, polls: int = 3) -> dict:
    """Wait until `predicate(stats)` holds for `polls` reads in a row with the step
    count not moving: the engine is standing still in that state (a full socket can
    take a few more events first, as the kernel grows its send buffer)."""
    def check():
        seen = []
        for _ in range(polls):
            s = stats(url)
            if not predicate(s):
                return None
            seen.append(s["step"])
            time.sleep(0.02)
        return s if len(set(seen)) == 1 else None
    return wait_for(check, what="a steady state")


def wait_idle(base_url: str, headers: dict | None = None) -> dict:
    """/stats once nothing runs, waits, or holds a block."""
    def idle():
        s = stats(base_url, headers)
        busy = s["running"] or s["waiting"] or s["paused"] or s["blocks_reserved"] or s["inbox"]
        return None if busy else s
    return wait_for(idle, what="the engine to hold nothing")


@contextlib.contextmanager
def serve_command(*args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`python -m live serve ARGS` on a free port, as a user starts it: the process
    (its output in `.stdout`) and its base URL once it is healthy. Stopped at the
    end if the test has not stopped it."""
    with launched(args, cwd=Path(__file__).resolve().parents[1], start_timeout_s=120,
                  grace_s=STOP_TIMEOUT_S) as server:
        yield server.process, server.url


class FaultyRunner:
    """Wraps a runner so that `execute` raises for the plans `fails(plan)` picks, as
    a model that breaks on some input would (`culprit`, `first_run_of_step`,
    `in_chunk` make the usual pickers). `failures` counts the raises."""

    def __init__(self, runner, fails):
        self.runner = runner
        self.fails = fails
        self.eos_token_ids = runner.eos_token_ids
        self.vocab_size = runner.vocab_size
        self.failures = 0

    def execute(self, plan) -> list[int]:
        if self.fails(plan):
            self.failures += 1
            raise RuntimeError(f"injected failure in step {plan.index}")
        return self.runner.execute(plan)

    def forget(self, seq_id: str) -> None:
        self.runner.forget(seq_id)


def culprit(seq_id: str, from_token: int = 0):
    """Fails every plan that computes `seq_id` once it has made `from_token` tokens."""
    return lambda plan: any(seq.id == seq_id and len(seq.output) >= from_token
                            for seq in plan.chunks + plan.decodes)


def first_run_of_step(index: int):
    """Fails the first run of step `index` (the whole step), not its runs again."""
    seen: set[int] = set()

    def fails(plan) -> bool:
        if plan.index != index or index in seen:
            return False
        seen.add(index)
        return True
    return fails


def in_chunk(seq_id: str):
    """Fails every plan in which `seq_id` computes a chunk that does not end its prompt."""
    return lambda plan: any(seq.id == seq_id for seq in plan.partials)
