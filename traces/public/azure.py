"""Azure LLM inference traces (Azure Public Dataset; Patel et al., "Splitwise",
ISCA 2024): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, one row per request.

Timestamps look like `2023-11-16 18:15:46.6805900`: seven fractional digits, no
time zone. They are parsed exactly (to the nanosecond, in integers: a float of the
epoch time cannot hold 100 ns) with any number of fractional digits, a space or a
`T`, and an optional `Z` or `+hh:mm` offset (later releases carry `+00:00`). A stamp
without a zone is taken as UTC; only differences matter.
"""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from ..errors import TraceError, shown
from ..record import TraceRequest
from ..shaping import shape
from .rows import PublicRow, csv_rows, requests_from_rows, token_count

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_STAMP = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
                    r"\s*(Z|[+-]\d{2}:?\d{2})?")
_EPOCH = dt.datetime(1970, 1, 1)


def timestamp_ns(text: str) -> int | None:
    """Nanoseconds since the epoch, or None when `text` is not a date and time."""
    m = _STAMP.fullmatch(text.strip())
    if not m:
        return None
    try:
        moment = dt.datetime(*(int(g) for g in m.groups()[:6]))
    except ValueError:
        return None
    ns = (moment - _EPOCH) // dt.timedelta(seconds=1) * 10**9
    ns += int((m[7] or "")[:9].ljust(9, "0"))
    zone = m[8]
    if zone and zone != "Z":
        hours, minutes = int(zone[1:3]), int(zone[-2:])
        sign = 1 if zone[0] == "+" else -1
        ns -= sign * (hours * 3600 + minutes * 60) * 10**9
    return ns


def load_azure(path: str | Path, **options) -> list[TraceRequest]:
    """Requests of an Azure LLM inference trace; `options` are those of `shape`."""
    source = Path(path).name
    rows = []
    for index, (line, cells) in enumerate(csv_rows(path, COLUMNS)):
        ns = timestamp_ns(cells["TIMESTAMP"])
        if ns is None:
            raise TraceError.at(source, line, "column 'TIMESTAMP' must be a date and time like "
                                              f"2023-11-16 18:15:46.6805900, got {shown(cells['TIMESTAMP'])}")
        rows.append(PublicRow(index, ns,
                              token_count(cells["ContextTokens"], source, line, "ContextTokens"),
                              token_count(cells["GeneratedTokens"], source, line, "GeneratedTokens")))
    return shape(requests_from_rows(rows, per_second=1e9), **options)
