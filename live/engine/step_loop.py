"""The thread that owns the engine and does nothing but steps. It sleeps on the
inbox when there is no work (no spinning) and hands each step's output to a
callback in one batch, and before it, in a batch each, the first tokens of the
prefill passes that end before their step (`Engine.step`). It never dies
silently: if the engine breaks, the loop stops and says so through `on_halt`, so
that whoever holds streams can end them."""
from __future__ import annotations

import logging
import threading
from typing import Callable

from .engine import Engine
from .step_output import StepOutput

log = logging.getLogger("twinstep.step_loop")


class StepLoop:
    def __init__(self, engine: Engine, deliver: Callable[[StepOutput], None],
                 before_step: Callable[[], None] | None = None,
                 after_step: Callable[[], None] | None = None,
                 on_halt: Callable[[BaseException], None] | None = None):
        """`before_step` may block: the `naive` backlog policy uses it to make the
        loop wait for its readers. `after_step` runs after every step, also one that
        made no event (a pause taking effect), e.g. to refresh a state snapshot.
        `on_halt(exc)` runs in the loop's thread if it stops for good on `exc`."""
        self.engine = engine
        self._deliver = deliver
        self._before_step = before_step
        self._after_step = after_step
        self._on_halt = on_halt
        self.halted: BaseException | None = None
        """Why the loop stopped for good, once it has."""
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="twinstep-step-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stopping.set()
        self.engine.core.inbox.wake()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """Stepping, or able to: started, and neither stopped nor halted."""
        return self._thread.is_alive() and self.halted is None

    def _hand(self, output: StepOutput) -> None:
        try:
            self._deliver(output)
        except Exception:
            log.exception("delivering step events failed")

    def _run(self) -> None:
        try:
            self._steps()
        except BaseException as exc:
            self.halted = exc
            log.critical("the step loop has stopped: no step can run any more", exc_info=exc)
            if self._on_halt is not None:
                self._on_halt(exc)

    def _steps(self) -> None:
        engine = self.engine
        inbox = engine.core.inbox
        while not self._stopping.is_set():
            if not engine.has_work():
                inbox.wait(timeout=1.0)
                continue
            if self._before_step is not None:
                self._before_step()
            output = engine.step(self._hand)
            if not output.is_empty:
                self._hand(output)
            # after the delivery, so that a view of the core it refreshes is never
            # newer than the events handed on before it
            if self._after_step is not None:
                self._after_step()
            if not engine.progressed:
                # nothing could run (all paused, or waiting on a held slot): only a
                # wish can change that
                inbox.wait(timeout=1.0)
