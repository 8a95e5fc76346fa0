"""What the live path adds outside the engine's steps. Zero until a calibration
sets them, except the transport buffer, which defaults to what a Linux connection
holds for a reader that stops: the server's send buffer grows to tcp_wmem's
largest (4 MiB by default) before a write waits, which is far more than the
16 KiB it starts at."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Overheads:
    request_s: float = 0.0
    """From arrival to `submit` while the server's front is free: HTTP parsing,
    validation, tokenization."""
    front_s: float = 0.0
    """How far apart requests that arrive together reach `submit`: the live server
    takes them in on one event loop, in turn, but parses the next while it hands on
    the last, so in a burst this is well below `request_s`."""
    wake_s: float = 0.0
    """From a wish reaching an idle engine's inbox to its step starting: the step
    loop waking (the engine's process hearing of it)."""
    delivery_s: float = 0.0
    """From the end of a step to its events being in the streams' queues."""
    disconnect_detect_s: float = 0.0
    """From the client leaving (FIN or RST alike) to the cancel in the core's inbox."""
    transport_bytes: int = 4_100_000
    """Bytes a stream's connection holds between the server queue and the reader.
    Measured: a live server's stream to a client that never read took 4.1 MB of
    events (8 KB and 32 KB each alike) before its queue grew, on loopback with
    Linux's default buffer settings."""

    def __post_init__(self):
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"{f.name} must be >= 0")
