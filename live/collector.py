"""The garbage collector of a serving process. A step makes objects for every token
(events, text, renders); at the collector's default thresholds the youngest
generation is collected every 700 of them and the older ones, which hold every
stream's buffers and the model, are walked again and again: measured on the
stand-in model, that was a quarter of the event loop's time at 1,024 streams.
Once the process is built, what it holds is frozen out of the collector's walks,
and collections come after many more allocations."""
from __future__ import annotations

import gc

THRESHOLDS = (100_000, 50, 1_000)


def settle() -> None:
    """Call once the process has built what it keeps (the model, the app)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


def release() -> None:
    """Before the process exits: what was frozen is collected again, so that native
    extensions see their objects freed."""
    gc.unfreeze()
