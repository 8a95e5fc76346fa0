"""The last records of something numbered (steps, finished requests), kept in a
bounded ring that readers page through by number; a reader that falls behind the
ring is told what it lost rather than silently skipped ahead."""
from __future__ import annotations

import bisect
import itertools
import threading
from collections import deque


class RecordsLost(LookupError):
    """Records a reader asked for have fallen out of the ring."""

    def __init__(self, what: str, after: int, lost_through: int, size: int):
        super().__init__(f"{what} {after + 1} to {lost_through} fell out of the ring of the last "
                         f"{size} {what}; read {what} more often, or keep more")
        self.what, self.after, self.lost_through, self.size = what, after, lost_through, size

    def __reduce__(self):
        # the loss crosses from an engine in its own process
        return type(self), (self.what, self.after, self.lost_through, self.size)


class RecordRing:
    """Entries are tuples whose first item is their number, rising from 1. Safe to
    append from one thread while another reads."""

    def __init__(self, size: int, what: str):
        if size < 1:
            raise ValueError(f"the ring of {what} must hold at least 1")
        self.what = what
        self._entries: deque[tuple] = deque(maxlen=size)
        self._lost_through = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self._entries.maxlen

    @property
    def last(self) -> int:
        """The newest entry's number; 0 before the first."""
        with self._lock:
            return self._entries[-1][0] if self._entries else 0

    def append(self, entry: tuple) -> None:
        with self._lock:
            if len(self._entries) == self._entries.maxlen:
                self._lost_through = self._entries[0][0]
            self._entries.append(entry)

    def after(self, number: int, limit: int | None = None) -> list[tuple]:
        """The entries numbered after `number`, oldest first, at most `limit`;
        raises `RecordsLost` if some of them are no longer kept."""
        with self._lock:
            if number < self._lost_through:
                raise RecordsLost(self.what, number, self._lost_through, self.size)
            first = bisect.bisect_right(self._entries, number, key=lambda e: e[0])
            stop = None if limit is None else first + limit
            return list(itertools.islice(self._entries, first, stop))
