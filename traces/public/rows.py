"""What every public trace comes down to: rows of (time, prompt length, output
length), read from CSV or JSON lines with errors that name the line and column,
then turned into requests the same way for every source.

Rules shared by all public loaders:

* time zero is the earliest timestamp in the file, before any row is skipped or
  filtered, so a time window means the same moments whatever the filters;
* rows are replayed in time order (ties keep file order);
* a row with 0 prompt tokens or 0 output tokens is skipped: it asked for nothing or
  made nothing (BurstGPT logs failed requests with 0 response tokens), and a
  server refuses a request with no prompt or nothing to make;
* a request's id is its 0-based data row in the source, so it can be found there;
* replays make exactly the traced output length (`ignore_eos` stays true).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import TraceError, shown
from ..record import MAX_COUNT, TraceRequest
from ..shaping import to_microsecond


@dataclass(frozen=True, slots=True)
class PublicRow:
    index: int
    """0-based data row in the source file."""
    time: int | float
    """In the source's own unit (see `per_second` of `requests_from_rows`)."""
    prompt_tokens: int
    output_tokens: int


def requests_from_rows(rows: list[PublicRow], *, per_second: float = 1.0,
                       origin: int | float | None = None) -> list[TraceRequest]:
    """`per_second` is how many time units make a second; `origin` is time zero
    (default: the earliest row given)."""
    if not rows:
        return []
    zero = min(r.time for r in rows) if origin is None else origin
    kept = sorted((r for r in rows if r.prompt_tokens > 0 and r.output_tokens > 0),
                  key=lambda r: r.time)
    return [TraceRequest(id=str(r.index), arrival_s=to_microsecond((r.time - zero) / per_second),
                         prompt_tokens=r.prompt_tokens, max_new_tokens=r.output_tokens)
            for r in kept]


def csv_header(path: str | Path) -> list[str]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        return [name.strip() for name in next(csv.reader(f), [])]


def csv_rows(path: str | Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: cell}) for each data row, with just `columns`, which
    the header must name (other columns are ignored: public files carry extras)."""
    source = Path(path).name
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = [name.strip() for name in next(reader, [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise TraceError.at(source, 1, f"header lacks column {missing[0]!r} (header: {','.join(header)})")
        where = {c: header.index(c) for c in columns}
        for cells in reader:
            if not cells or cells == [""]:
                continue
            if len(cells) < len(header):
                raise TraceError.at(source, reader.line_num,
                                    f"has {len(cells)} columns, the header has {len(header)}")
            yield reader.line_num, {c: cells[i].strip() for c, i in where.items()}


def token_count(cell: str, source: str, line: int, column: str) -> int:
    """A non-negative integer; "12.0" is accepted, as some exports write counts as floats."""
    try:
        value = float(cell)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_COUNT or not value.is_integer():
        raise TraceError.at(source, line, f"column {column!r} must be a non-negative integer, "
                                          f"got {shown(cell)}")
    return int(value)


def seconds(cell: str, source: str, line: int, column: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise TraceError.at(source, line, f"column {column!r} must be a non-negative number of "
                                          f"seconds, got {shown(cell)}")
    return value
