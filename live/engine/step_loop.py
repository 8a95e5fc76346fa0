"""The thread that owns the engine and does nothing but steps. It sleeps on the
inbox when there is no work (no spinning) and hands each step's output to a
callback in one batch."""
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
                 after_step: Callable[[], None] | None = None):
        """`before_step` may block: the `naive` backlog policy uses it to make the
        loop wait for its readers. `after_step` runs after every step, also one that
        made no event (a pause taking effect), e.g. to refresh a state snapshot."""
        self.engine = engine
        self._deliver = deliver
        self._before_step = before_step
        self._after_step = after_step
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
        return self._thread.is_alive()

    def _run(self) -> None:
        engine = self.engine
        inbox = engine.core.inbox
        while not self._stopping.is_set():
            if not engine.has_work():
                inbox.wait(timeout=1.0)
                continue
            if self._before_step is not None:
                self._before_step()
            output = engine.step()
            if not output.is_empty:
                try:
                    self._deliver(output)
                except Exception:
                    log.exception("delivering step events failed")
            # after the delivery, so that a view of the core it refreshes is never
            # newer than the events handed on before it
            if self._after_step is not None:
                self._after_step()
            if not engine.progressed:
                # nothing could run (all paused, or waiting on a held slot): only a
                # wish can change that
                inbox.wait(timeout=1.0)
