"""The studies by name, and which of them a command asks for."""
from __future__ import annotations

from collections.abc import Callable

from . import backpressure, disconnect, hol, overlap, proxy, slow_reader
from .bench import Bench, Findings

Study = Callable[[Bench], Findings]

STUDIES: dict[str, Study] = {
    "overlap": overlap.run,
    "slow-reader": slow_reader.run,
    "disconnect": disconnect.run,
    "backpressure": backpressure.run,
    "hol": hol.run,
    "proxy": proxy.run,
}
VARIANTS: dict[str, tuple[str, Study]] = {
    "slow-reader": ("slow-reader-fill", slow_reader.run_fill),
}
"""What `--fill` asks of a study, under the name of its folder."""


def runs(name: str, fill: bool = False) -> list[tuple[str, Study]]:
    """The studies `name` asks for, each under the name of its folder: `all` is
    every one, and every variant."""
    if name == "all":
        chosen = []
        for n, study in STUDIES.items():
            chosen.append((n, study))
            if n in VARIANTS:
                chosen.append(VARIANTS[n])
        return chosen
    if fill:
        if name not in VARIANTS:
            raise ValueError(f"--fill is a variant of {', '.join(VARIANTS)} only")
        return [VARIANTS[name]]
    return [(name, STUDIES[name])]
