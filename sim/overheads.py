"""What the live path adds outside the engine's steps. Zero until a calibration
sets them, except the transport buffer, which defaults to Linux's default socket
buffers (tcp_wmem 16 KiB on the server plus tcp_rmem 128 KiB on the client)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Overheads:
    request_s: float = 0.0
    """From arrival to `submit`: HTTP parsing, validation, tokenization."""
    delivery_s: float = 0.0
    """From the end of a step to its events being in the streams' queues."""
    disconnect_detect_s: float = 0.0
    """From the client leaving (FIN or RST alike) to the cancel in the core's inbox."""
    transport_bytes: int = 16384 + 131072
    """Bytes a stream's connection holds between the server queue and the reader."""

    def __post_init__(self):
        for name in ("request_s", "delivery_s", "disconnect_detect_s", "transport_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
