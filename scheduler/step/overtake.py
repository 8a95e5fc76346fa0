"""Overtaking at admission: a waiting request whose reservation does not fit is
passed over by later ones that fit, until `max_overtakes` of them have gone ahead
of it; then admission stops behind it until it fits (aging, so that a large
request is never starved).

Passing over costs a look at every waiting request behind the one that does not
fit, each step, which on a long queue would cost more than the step. So the
record of the last scan that went to the end of the queue is kept: until blocks
are freed or the queue changes other than by arrivals at its end, none of the
requests it passed over can fit, and the next scan looks only at the arrivals
since."""
from __future__ import annotations

from collections.abc import Iterable

from ..request import Sequence


class Overtaking:
    __slots__ = ("bound", "overtakes", "record")

    def __init__(self, bound: int):
        self.bound = bound
        self.overtakes = 0
        """Admissions ahead of a waiting request that arrived earlier and did not fit."""
        self.record: tuple[int, int, list[Sequence]] | None = None
        """After a scan to the end of the queue that passed requests over: the last
        arrival it saw, the free blocks it left and the requests it passed over."""

    def resume(self, waiting: dict[str, Sequence],
               free_blocks: int) -> tuple[Iterable[Sequence], list[Sequence]]:
        """Given a record, the waiting requests the next scan must look at, in
        arrival order, and those it starts having passed over; the record is used."""
        last, free_then, passed = self.record
        self.record = None
        if free_blocks > free_then:  # blocks freed: any of them may fit now
            return waiting.values(), []
        arrived: list[Sequence] = []
        for seq in reversed(waiting.values()):
            if seq.arrival <= last:
                break
            arrived.append(seq)
        arrived.reverse()
        return arrived, passed

    def overtook(self, passed: list[Sequence]) -> bool:
        """One admission has gone ahead of `passed`: whether one of them may now be
        overtaken no more."""
        self.overtakes += 1
        bound = self.bound
        at_bound = False
        for seq in passed:
            seq.overtaken += 1
            at_bound = at_bound or seq.overtaken >= bound
        return at_bound

    def scanned(self, waiting: dict[str, Sequence], free_blocks: int,
                passed: list[Sequence]) -> None:
        """A scan went to the end of the queue, passed `passed` over and left
        `free_blocks` free."""
        self.record = (next(reversed(waiting.values())).arrival, free_blocks, passed)

    def queue_changed(self) -> None:
        """A waiting request left the queue or came back to it (cancelled, paused,
        resumed, preempted): the next scan looks at the whole queue."""
        self.record = None
