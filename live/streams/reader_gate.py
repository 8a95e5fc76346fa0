"""The naive backlog policy's gate between the step loop and the streams' writers."""
from __future__ import annotations

import threading


class ReaderGate:
    """Under `naive` the step loop waits here until every event it delivered has
    been written to its readers: the head-of-line blocking of a server that awaits
    each write before the next step."""

    def __init__(self):
        self._cond = threading.Condition()
        self._unwritten = 0
        self._open = False
        self.waiting = False

    def add(self, n: int) -> None:
        with self._cond:
            self._unwritten += n
            if self._unwritten <= 0:
                self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            self.waiting = True
            self._cond.wait_for(lambda: self._open or self._unwritten <= 0)
            self.waiting = False

    def open(self) -> None:
        """Never wait again (shutdown)."""
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def shut(self) -> None:
        """Wait again, as before `open`."""
        with self._cond:
            self._open = False
