"""Bytes one event takes on the wire, per streaming format. The sizes are those of
representative events (a one-word token, ids and model name as the server writes
them); they matter only for how fast a byte-rate reader drains and how much a
transport buffer holds."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WireFormat:
    name: str
    token_bytes: int
    """One token event: `id:`/`event:`/`data:` lines and the blank line."""
    final_bytes: int
    """Everything after the last token (done event, `[DONE]`, message_stop ...)."""

    def padded(self, padding: int) -> WireFormat:
        """As a server started with `--event-padding` sends it: a comment line of
        `padding` bytes (": " and two newlines around them) after every event."""
        if padding < 0:
            raise ValueError(f"event_padding must be >= 0, not {padding}")
        extra = padding + 4 if padding else 0
        return WireFormat(self.name, self.token_bytes + extra, self.final_bytes + extra)


WIRE_FORMATS: dict[str, WireFormat] = {w.name: w for w in (
    WireFormat("twinstep", token_bytes=88, final_bytes=84),
    WireFormat("openai", token_bytes=210, final_bytes=212),
    WireFormat("anthropic", token_bytes=119, final_bytes=265),
)}


def wire_format(name: str) -> WireFormat:
    try:
        return WIRE_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown wire format {name!r}; choose from {sorted(WIRE_FORMATS)}") from None
