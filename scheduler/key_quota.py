"""What each API key holds at once: its streams (submitted and not yet finished,
each holding a place in the queue or a slot for its whole life) and, of those, the
ones still waiting for their first admission. A key at its limit is refused at
submit, before anything is held; counting what is held, not requests per minute,
is what keeps one key from filling the batch."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .errors import InvariantBroken, KeyLimitReached


@dataclass(frozen=True, slots=True)
class KeyHolding:
    streams: int = 0
    waiting: int = 0


class KeyQuota:
    """Any thread may `take`; the stepping thread calls `admitted` and `give_back`.
    A limit of None is no limit; a request without a key is never counted."""

    def __init__(self, max_streams: int | None, max_waiting: int | None):
        self.max_streams = max_streams
        self.max_waiting = max_waiting
        self._lock = threading.Lock()
        self._streams: dict[str, int] = {}
        self._waiting: dict[str, int] = {}

    def take(self, key: str) -> None:
        """Count a new request of `key` as a waiting stream, or refuse it."""
        with self._lock:
            streams = self._streams.get(key, 0)
            waiting = self._waiting.get(key, 0)
            if self.max_streams is not None and streams >= self.max_streams:
                raise KeyLimitReached(key, "streams", self.max_streams)
            if self.max_waiting is not None and waiting >= self.max_waiting:
                raise KeyLimitReached(key, "waiting requests", self.max_waiting)
            _change(self._streams, key, 1)
            _change(self._waiting, key, 1)

    def admitted(self, key: str) -> None:
        """Its first admission: no longer waiting (a preempted one is not counted
        again: it is not new work its key asked for)."""
        with self._lock:
            _change(self._waiting, key, -1)

    def give_back(self, key: str, waiting: bool) -> None:
        """It finished (or was never accepted); `waiting`: before its first admission."""
        with self._lock:
            _change(self._streams, key, -1)
            if waiting:
                _change(self._waiting, key, -1)

    def holding(self) -> dict[str, KeyHolding]:
        """Each key that holds something, and what."""
        with self._lock:
            return {key: KeyHolding(n, self._waiting.get(key, 0))
                    for key, n in self._streams.items()}

    def is_empty(self) -> bool:
        with self._lock:
            return not self._streams and not self._waiting


def _change(counts: dict[str, int], key: str, by: int) -> None:
    """A key leaves the table when it holds nothing, so that the table stays as
    small as the keys active now."""
    n = counts.get(key, 0) + by
    if n < 0:
        raise InvariantBroken(f"key {key!r} gave back more than it took")
    if n:
        counts[key] = n
    else:
        counts.pop(key, None)
