"""When a request of a closed-loop trace may be sent: an open-loop request at its
arrival; a session's requests one after another, each `think_s` after its client
was done with the one before and not before its own arrival (see `TraceRequest`).
The same bookkeeping for the simulator's clock and the load generator's loop:
each tells it when a request arrives and when a client is done, and sends what it
says when it says."""
from __future__ import annotations

from collections import deque

from .record import TraceRequest


class Sessions:
    def __init__(self) -> None:
        self._waiting: dict[str, deque[TraceRequest]] = {}
        """Busy sessions (a request of theirs sent, or due), with the requests that
        arrived meanwhile, in order."""
        self._done_at: dict[str, float] = {}
        """When each idle session's last request was done."""

    def arrived(self, request: TraceRequest, now: float) -> float | None:
        """`request` arrives at `now`: when it may be sent, or None if its session
        is busy (`done` gives it once its turn comes)."""
        session = request.session
        if session is None:
            return now
        if session in self._waiting:
            self._waiting[session].append(request)
            return None
        self._waiting[session] = deque()
        done_at = self._done_at.pop(session, None)
        return now if done_at is None else max(now, done_at + request.think_s)

    def done(self, request: TraceRequest, now: float) -> tuple[TraceRequest, float] | None:
        """The client of `request` is done with it at `now`: its session's next
        request that has arrived (so its arrival is past) and when it may be sent,
        its think time from now, if there is one."""
        session = request.session
        if session is None:
            return None
        waiting = self._waiting[session]
        if not waiting:
            del self._waiting[session]
            self._done_at[session] = now
            return None
        following = waiting.popleft()
        return following, now + following.think_s
