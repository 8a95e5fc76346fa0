"""Progress bars on the terminal: requests finished (and the simulated time) for a
replay, replays done for a sweep. Shown on stderr when it is a terminal and the
user did not ask for quiet; otherwise there is no bar and no cost at all."""
from __future__ import annotations

import sys

from tqdm import tqdm


def wanted(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


class ReplayBar:
    """A `Progress` callback for `replay`: requests finished against the trace's
    requests, with the simulated clock beside them."""

    def __init__(self, requests: int | None):
        """`requests`: the trace's, if known before it is read."""
        self.bar = tqdm(total=requests, unit="req", desc="replay", file=sys.stderr,
                        dynamic_ncols=True)

    def __call__(self, now_s: float, finished: int) -> None:
        self.bar.set_postfix_str(f"{now_s:.1f} s simulated", refresh=False)
        self.bar.update(finished - self.bar.n)

    def close(self) -> None:
        self.bar.close()


class SweepBar:
    """Replays of a sweep done, in whatever order they finish."""

    def __init__(self, replays: int):
        self.bar = tqdm(total=replays, unit="replay", desc="sweep", file=sys.stderr,
                        dynamic_ncols=True)

    def __call__(self) -> None:
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
