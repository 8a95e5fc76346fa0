"""The engine's own process: it builds the engine, steps it, and speaks with the
server over one pipe. From the server come the start, submits (each answered with
the core's refusal or none, and what the keys hold after it), cancels, pauses,
resumes, asks for pages of the step log, the `naive` gate's go-aheads and the
stop; to it go each step's output, the core's view after each step, the answers,
and the reason if the step loop stops for good, after which this process exits.

Every message is sent under one lock, and the keys' holdings it carries are read
under that lock, so the server sees them in the order they were read."""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection

from .. import collector
from .core_view import CoreView
from .engine import Engine
from .handle import EngineFacts
from .record_ring import RecordsLost
from .step_loop import StepLoop
from .step_output import StepOutput

log = logging.getLogger("twinstep.engine")

HALTED_EXIT = 3
"""The exit code of a process whose step loop stopped for good."""


def run(build: Callable[[], tuple[Engine, object]], conn: Connection, device: str, gated: bool,
        log_level: int) -> None:
    """The process's entry: build the engine (`build` returns it and what the server
    serves), say it is ready, and serve the pipe until the server stops it or is gone."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine, served = build()
    collector.settle()
    EngineChild(engine, conn, device, gated, served).serve()
    collector.release()


class EngineChild:
    def __init__(self, engine: Engine, conn: Connection, device: str, gated: bool, served):
        self.engine = engine
        self._conn = conn
        self._sending = threading.Lock()
        self._go = threading.Event() if gated else None
        self._loop = StepLoop(engine, self._deliver, self._before_step if gated else None,
                              self._after_step, self._halt)
        self._send("ready", EngineFacts.of(engine, device), CoreView.of(engine), served)

    def serve(self) -> None:
        commands = {"start": self._loop.start, "submit": self._submit,
                    "cancel": self.engine.cancel, "pause": self.engine.pause,
                    "resume": self.engine.resume, "steps": self._steps, "go": self._go_ahead}
        while True:
            try:
                kind, *args = self._conn.recv()
            except (EOFError, OSError):
                log.error("the server is gone; the engine stops")
                break
            if kind == "stop":
                break
            try:
                commands[kind](*args)
            except Exception:
                # a wish that raises is that wish's failure, never the engine's
                log.exception("the command %r raised", kind)
        if self._go is not None:
            self._go.set()
        self._loop.stop()
        self.engine.step_log.close()

    def _send(self, *message) -> None:
        with self._sending:
            self._conn.send(message)

    def _answer(self, ask: int, result) -> None:
        with self._sending:
            self._conn.send(("answer", ask, result, self.engine.core.keys.holding()))

    # -- commands ---------------------------------------------------------------

    def _submit(self, ask: int, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
                sampling, key: str | None) -> None:
        try:
            self.engine.submit(seq_id, prompt_ids, max_new_tokens, sampling, key)
            refusal = None
        except Exception as exc:  # a refusal, or a failure the server answers with a 500
            refusal = exc
        self._answer(ask, refusal)

    def _steps(self, ask: int, after: int, limit: int) -> None:
        try:
            records = self.engine.step_log.after(after, limit)
        except RecordsLost as exc:
            records = exc
        self._answer(ask, records)

    def _go_ahead(self) -> None:
        self._go.set()

    # -- the step loop's side -----------------------------------------------------

    def _before_step(self) -> None:
        self._send("gate")
        self._go.wait()
        self._go.clear()

    def _deliver(self, output: StepOutput) -> None:
        self._send("out", output)

    def _after_step(self) -> None:
        with self._sending:
            self._conn.send(("view", CoreView.of(self.engine)))

    def _halt(self, exc: BaseException) -> None:
        try:
            self._send("halt", repr(exc))
            self.engine.step_log.close()
        finally:
            # the core can no longer be trusted: the server starts another engine
            os._exit(HALTED_EXIT)
