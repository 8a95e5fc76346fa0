"""Wishes from other threads (submit, cancel, pause, resume), recorded now and
applied by the core at the next step boundary, in the order they came."""
from __future__ import annotations

import enum
import threading

from .errors import QueueFull
from .request import FinishReason, Request


class Wish(enum.Enum):
    SUBMIT = "submit"
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"


class Inbox:
    def __init__(self, max_waiting: int):
        self.max_waiting = max_waiting
        # Every step takes the plain lock (cheap); only recording a wish and
        # waiting for one go through the condition built on it.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._wishes: list[tuple] = []
        self._pending_submits = 0
        self._waiting = 0
        self._woken = False

    def submit(self, request: Request) -> None:
        with self._cond:
            if self._pending_submits + self._waiting >= self.max_waiting:
                raise QueueFull(f"waiting queue is full ({self.max_waiting} requests)")
            self._pending_submits += 1
            self._wishes.append((Wish.SUBMIT, request))
            self._cond.notify_all()

    def cancel(self, seq_id: str, reason: FinishReason = FinishReason.CANCELLED) -> None:
        self._record(Wish.CANCEL, seq_id, reason)

    def pause(self, seq_id: str) -> None:
        self._record(Wish.PAUSE, seq_id)

    def resume(self, seq_id: str) -> None:
        self._record(Wish.RESUME, seq_id)

    def _record(self, *wish) -> None:
        with self._cond:
            self._wishes.append(wish)
            self._cond.notify_all()

    def take(self) -> list[tuple]:
        """All wishes recorded so far, oldest first; the inbox is left empty."""
        if not self._wishes:
            # Most steps find nothing, so they skip the lock; a wish recorded
            # meanwhile is taken at the next step, as if it had come after this one.
            return []
        with self._lock:
            wishes, self._wishes = self._wishes, []
            self._pending_submits = 0
            return wishes

    def has_wishes(self) -> bool:
        """Whether a wish waits, without the lock: one recorded meanwhile is seen at
        the next look, as `take` sees it."""
        return bool(self._wishes)

    def set_waiting(self, n: int) -> None:
        """The core tells the inbox how many requests wait, for the waiting limit
        (every step: only a change takes the lock)."""
        if n != self._waiting:  # only the stepping thread writes it
            with self._lock:
                self._waiting = n

    def __len__(self) -> int:
        with self._lock:
            return len(self._wishes)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until some wish is recorded, `wake` is called, or the timeout;
        True if there is a wish."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._wishes) or self._woken, timeout)
            self._woken = False
            return bool(self._wishes)

    def wake(self) -> None:
        """Wake a thread blocked in `wait` now or next (used when a driver stops)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()
