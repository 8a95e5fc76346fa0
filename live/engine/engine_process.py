"""The engine stepping in a process of its own (`engine_child`), so that the
server's event loop (HTTP, the hub, SSE, socket writes) has an interpreter to
itself and never waits on a step's lock.

The event loop reads the child's messages as they come (step outputs and views to
the hub, answers to the futures that asked for them); the `naive` policy's gate
runs in a thread of its own. If the child ends (a crash, or its step loop
stopped for good), every open stream ends with an error at once, asks in flight
fail with `EngineStopped`, and a new child is started behind the same listening
socket; new requests are refused with 503 until it is ready. Streams in flight at
the crash are not carried over: what they held died with the child."""
from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import os
import queue
import socket
import threading
import time
from collections.abc import Callable

from scheduler import FinishReason, KeyHolding

from ..runner.params import SamplingParams
from . import engine_child
from .core_view import CoreView
from .engine import Engine
from .handle import EngineStopped, StepSink

log = logging.getLogger("twinstep.engine")

STOP_TIMEOUT_S = 30.0
ASKS = ("submit", "steps")
"""The messages that carry an ask, answered by the child."""
SOCKET_BUFFER_BYTES = 4 << 20
"""How much of its steps the engine may send ahead of a loop that lags (the system's
maximum, if lower): a loop that finds many steps waiting writes each stream's
tokens of all of them at once."""
MESSAGES_PER_WAKE = 64
"""Messages read at one wake of the loop, before the loop turns to its sockets."""


class EngineProcess:
    def __init__(self, build: Callable[[], tuple[Engine, object]], device: str, gated: bool):
        """Start the child and wait until its engine is built. `build` (picklable: it
        runs in the child) returns the engine and what the server serves (`served`);
        `gated`: the backlog policy makes the engine wait for its readers."""
        self._build = build
        self._device = device
        self._gated = gated
        self.starts = 0
        self._halted: str | None = None
        self._stopping = False
        self._outbox: queue.SimpleQueue[tuple | None] = queue.SimpleQueue()
        """What the server sends the child, in order, for the writer thread."""
        self._asks = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        self._gates: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._sink: StepSink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._launch()

    def _launch(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process that holds threads
        ours, theirs = context.Pipe()
        _widen(theirs, socket.SO_SNDBUF)
        _widen(ours, socket.SO_RCVBUF)
        process = context.Process(target=engine_child.run, name="twinstep-engine", daemon=True,
                                  args=(self._build, theirs, self._device, self._gated,
                                        logging.getLogger().getEffectiveLevel()))
        process.start()
        theirs.close()
        try:
            _, self.facts, self._view, self.served = ours.recv()
        except (EOFError, OSError):
            process.join()
            raise EngineStopped(f"the engine's process ended while it started (exit code "
                                f"{process.exitcode}); see its log") from None
        self._process, self._conn = process, ours
        self._reason: str | None = None
        """Why the child said it stopped, if it did."""
        self._holding = self._view.holding
        self.starts += 1

    @property
    def halted(self) -> str | None:
        return self._halted

    @property
    def alive(self) -> bool:
        return self._sink is not None and self._halted is None and not self._stopping

    def holding(self) -> dict[str, KeyHolding]:
        return self._holding

    def view(self) -> CoreView:
        return self._view

    def start(self, sink: StepSink) -> None:
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        self._listen()
        threading.Thread(target=self._write, name="twinstep-engine-writer", daemon=True).start()
        if self._gated:
            threading.Thread(target=self._open_gates, name="twinstep-reader-gate",
                             daemon=True).start()
        self._send("start")

    # -- the server's side ------------------------------------------------------

    async def submit(self, seq_id: str, prompt_ids: list[int], max_new_tokens: int,
                     sampling: SamplingParams, key: str | None) -> None:
        refusal = await self._ask("submit", seq_id, list(prompt_ids), max_new_tokens, sampling,
                                  key)
        if refusal is not None:
            raise refusal  # the core's SubmitRefused, or what else submitting raised

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        self._send("cancel", seq_id, reason)

    def pause(self, seq_id: str) -> None:
        self._send("pause", seq_id)

    def resume(self, seq_id: str) -> None:
        self._send("resume", seq_id)

    async def steps_after(self, step: int, limit: int) -> list[dict]:
        records = await self._ask("steps", step, limit)
        if isinstance(records, Exception):
            raise records
        return records

    def stop(self) -> None:
        self._stopping = True
        self._gates.put(False)
        if self._loop is not None:
            self._loop.remove_reader(self._conn.fileno())
        self._send("stop")
        self._outbox.put(None)
        # what it still sends is read and let go, so that no send of its blocks its exit
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self._process.is_alive() and time.monotonic() < deadline:
            try:
                if self._conn.poll(0.05):
                    self._conn.recv()
            except (EOFError, OSError):
                self._process.join(max(0.0, deadline - time.monotonic()))
        if self._process.is_alive():
            log.error("the engine's process did not stop in %.0f s; it is killed", STOP_TIMEOUT_S)
            self._process.kill()
            self._process.join()

    def _send(self, *message) -> None:
        # never on the loop: the child may be blocked sending to the loop, which
        # must go on reading
        self._outbox.put(message)

    def _ask(self, *command) -> asyncio.Future:
        ask = next(self._asks)
        answer = self._loop.create_future()
        self._pending[ask] = answer
        self._send(command[0], ask, *command[1:])
        return answer

    def _write(self) -> None:
        """The writer thread: each message to the child that runs now. One sent to a
        child that has ended is lost, with whatever it held; an ask among them is
        failed when the loop learns of the end."""
        while (message := self._outbox.get()) is not None:
            try:
                self._conn.send(message)
            except OSError:
                if message[0] in ASKS:
                    self._loop.call_soon_threadsafe(self._fail, message[1])

    # -- what the child sends ----------------------------------------------------

    def _listen(self) -> None:
        # read on the event loop itself: a relay thread would wrestle the loop for the
        # interpreter lock at every step
        self._loop.add_reader(self._conn.fileno(), self._take_messages)

    def _take_messages(self) -> None:
        """On the loop: every message the child has sent so far."""
        conn, sink = self._conn, self._sink
        try:
            for _ in range(MESSAGES_PER_WAKE):
                kind, *args = conn.recv()
                if kind == "out":
                    sink.deliver(args[0])
                elif kind == "view":
                    self._holding = args[0].holding
                    sink.after_step(args[0])
                elif kind == "answer":
                    ask, result, self._holding = args
                    self._settle(ask, result)
                elif kind == "gate":
                    self._gates.put(True)
                elif kind == "halt":
                    self._reason = args[0]
                if not conn.poll():
                    return
            return
        except (EOFError, OSError):
            self._loop.remove_reader(conn.fileno())
        if not self._stopping:
            threading.Thread(target=self._replace, name="twinstep-engine-restart",
                             daemon=True).start()

    def _replace(self) -> None:
        """The child has ended: end what it held, and start another in its place."""
        self._process.join()
        self._halted = (f"the engine's process ended (exit code {self._process.exitcode}): "
                        f"{self._reason or 'no reason given'}")
        log.error("%s; its streams end, and another engine starts", self._halted)
        self._sink.halt(self._halted)
        self._loop.call_soon_threadsafe(self._fail_pending)
        self._conn.close()
        try:
            self._launch()
        except Exception:
            log.exception("no engine could start again: requests are refused from now on")
            return
        self._halted = None
        self._sink.restarted(self._view)
        self._loop.call_soon_threadsafe(self._listen)
        self._send("start")

    def _settle(self, ask: int, result) -> None:
        answer = self._pending.pop(ask, None)
        if answer is not None and not answer.done():
            answer.set_result(result)

    def _fail_pending(self) -> None:
        for ask in list(self._pending):
            self._fail(ask)

    def _fail(self, ask: int) -> None:
        answer = self._pending.pop(ask, None)
        if answer is not None and not answer.done():
            answer.set_exception(EngineStopped("the engine stopped before it answered"))

    def _open_gates(self) -> None:
        """Under `naive`: each step waits, in the child, until the readers have taken
        what the steps before it made."""
        while self._gates.get():
            self._sink.before_step()
            self._send("go")


def _widen(conn, option: int) -> None:
    """Ask for a socket buffer of `SOCKET_BUFFER_BYTES` (the kernel caps it)."""
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
