"""Mooncake traces (Qin et al., FAST 2025): JSON lines `{"timestamp": ms,
"input_length", "output_length", "hash_ids": [...]}`.

`hash_ids` name the 512-token blocks of the prompt (shared ids mean a shared
prefix). A `TraceRequest` has no place for them, so they are dropped: a replay
makes prompts of the given lengths, without the shared prefixes.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import TraceError, shown
from ..jsonl import json_lines
from ..record import MAX_COUNT, TraceRequest
from ..shaping import shape
from .rows import PublicRow, requests_from_rows

FIELDS = ("timestamp", "input_length", "output_length")


def _count(obj: dict, name: str, source: str, line: int) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= MAX_COUNT or not float(value).is_integer():
        problem = "is missing" if name not in obj else f"must be a non-negative integer, got {shown(value)}"
        raise TraceError.at(source, line, f"field {name!r} {problem}")
    return int(value)


def load_mooncake(path: str | Path, **options) -> list[TraceRequest]:
    """Requests of a Mooncake trace; `options` are those of `shape`."""
    source = Path(path).name
    rows = []
    for line_no, obj in json_lines(path):
        if not isinstance(obj, dict):
            raise TraceError.at(source, line_no, f"a row must be a JSON object, got {shown(obj)}")
        ms, prompt, output = (_count(obj, name, source, line_no) for name in FIELDS)
        rows.append(PublicRow(len(rows), ms, prompt, output))
    return shape(requests_from_rows(rows, per_second=1000), **options)
