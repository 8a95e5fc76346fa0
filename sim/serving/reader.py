"""The client at the other end of a simulated stream, as the hub sees it."""
from __future__ import annotations

from typing import Protocol

from traces.outcome import RequestOutcome
from traces.record import TraceRequest

from .connection import Connection


class Reader(Protocol):
    """The client at the other end of a stream, as the hub sees it. An instant
    reader's tokens are taken here as they are delivered (see `SimClient`)."""

    request: TraceRequest
    outcome: RequestOutcome
    """Filled by the hub with what only the server sees."""
    connection: Connection | None
    """Set by the hub when the request is accepted."""
    done: bool
    """Reads nothing more."""
    ended: bool
    """The stream's final event from the engine was delivered."""
    instant: bool
    runs: list[tuple[int, int]]
    run_end: int | None
    leaves_after_index: int

    def notify(self) -> None:
        """The hub has put events in the connection."""

    def leave(self) -> None:
        """Leave now: an instant reader at the token it leaves after."""

    def read_final(self, now: float) -> None:
        """An instant reader takes the stream's final event."""

    def cut(self) -> None:
        """The server dropped the connection: read nothing more."""

    def starts_run(self, index: int) -> bool:
        """Whether an instant reader's token `index` is the first of a run."""

    def new_run(self, index: int, step: int) -> None:
        """An instant reader's token `index` came with `step`: a run of one token a
        step begins."""

    def preempted(self, tokens: int) -> None:
        """An instant reader's sequence lost its blocks after making `tokens`."""

    def took_early(self, index: int, at: float) -> None:
        """An instant reader took token `index` at `at`, before its step's delivery."""
