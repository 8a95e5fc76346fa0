"""How far a calibration has come: a bar when stderr is a terminal; elsewhere (a
log file, CI) a line at most every `LINE_EVERY_S`, so that minutes of driving a
server are not silent there either."""
from __future__ import annotations

import sys
import time
from typing import Callable

from tqdm import tqdm

from sim.progress import wanted

LINE_EVERY_S = 30.0


class Progress:
    """Requests done against `total`: `update` as each finishes, `close` at the end."""

    def __init__(self, total: int, what: str, log: Callable[[str], object], *,
                 terminal: bool | None = None, clock: Callable[[], float] = time.monotonic):
        self.total, self.what, self.log, self.clock = total, what, log, clock
        self.done = 0
        self.started = self.last_line = clock()
        terminal = wanted(quiet=False) if terminal is None else terminal
        self.bar = (tqdm(total=total, unit="req", desc=what, file=sys.stderr, dynamic_ncols=True)
                    if terminal else None)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.clock() - self.last_line >= LINE_EVERY_S:
            self.last_line = self.clock()
            elapsed = round(self.last_line - self.started)
            self.log(f"{self.what}: {self.done} of {self.total} requests, "
                     f"{elapsed // 60} min {elapsed % 60} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
