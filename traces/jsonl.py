"""The native trace format: JSON lines, one request per line, field for field the
`TraceRequest` record. The format is described in `traces/README.md`.

The reader is strict because a trace drives hours of replay: an unknown field (a
typo), a value of the wrong kind or a client setting that cannot take effect is an
error naming the line and the field, never silently a default. The writer leaves
out fields at their defaults, and refuses any request the reader would refuse.
"""
from __future__ import annotations

import difflib
import enum
import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .errors import TraceError, shown
from .record import MAX_COUNT, Client, LeaveHow, ReadMode, TraceRequest
from .names import KEY_NAME


class FieldError(Exception):
    """One field of one request is wrong; the caller adds the line."""

    def __init__(self, name: str | None, problem: str):
        super().__init__(f"field '{name}' {problem}" if name else problem)


def _is_int(v: object) -> bool:
    """An integer a 64-bit one holds (a seed may be unsigned)."""
    return (isinstance(v, int) and not isinstance(v, bool)
            and -MAX_COUNT - 1 <= v <= 2 * MAX_COUNT + 1)


def _is_number(v: object) -> bool:
    return _is_int(v) or (isinstance(v, float) and math.isfinite(v))


# Each kind: what the value must be (for the message), a test, and the conversion.
_Kind = tuple[str, Callable[[Any], bool], Callable[[Any], Any]]
_ID: _Kind = ("a non-empty string", lambda v: isinstance(v, str) and v != "", str)
_POSITIVE_INT: _Kind = ("a positive integer", lambda v: _is_int(v) and 0 < v <= MAX_COUNT, int)
_COUNT: _Kind = ("a non-negative integer", lambda v: _is_int(v) and 0 <= v <= MAX_COUNT, int)
_NON_NEGATIVE: _Kind = ("a non-negative number", lambda v: _is_number(v) and v >= 0, float)
_FRACTION: _Kind = ("a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1, float)
_BOOL: _Kind = ("true or false", lambda v: isinstance(v, bool), bool)
_TEXT: _Kind = ("a string or null", lambda v: v is None or isinstance(v, str), lambda v: v)
_INT_OR_NULL: _Kind = ("an integer or null", lambda v: v is None or _is_int(v), lambda v: v)
_KEY_OR_NULL: _Kind = (
    "a key name (1 to 64 letters, digits, '.', '_' or '-') or null",
    lambda v: v is None or (isinstance(v, str) and KEY_NAME.fullmatch(v) is not None),
    lambda v: v)
_COUNT_OR_NULL: _Kind = (
    "a non-negative integer or null", lambda v: v is None or _COUNT[1](v), lambda v: v)
_SECONDS_OR_NULL: _Kind = (
    "a non-negative number or null",
    lambda v: v is None or (_is_number(v) and v >= 0),
    lambda v: None if v is None else float(v))


def _one_of(enum_type) -> _Kind:
    names = [m.value for m in enum_type]
    return ("one of " + ", ".join(f'"{n}"' for n in names), lambda v: v in names, enum_type)


_REQUIRED = ("id", "arrival_s", "prompt_tokens", "max_new_tokens")
_REQUEST_KINDS: dict[str, _Kind] = {
    "id": _ID,
    "arrival_s": _NON_NEGATIVE,
    "prompt_tokens": _POSITIVE_INT,
    "max_new_tokens": _POSITIVE_INT,
    "prompt": _TEXT,
    "temperature": _NON_NEGATIVE,
    "top_p": _FRACTION,
    "top_k": _COUNT,
    "seed": _INT_OR_NULL,
    "ignore_eos": _BOOL,
    "key": _KEY_OR_NULL,
    "session": ("a non-empty string or null", lambda v: v is None or _ID[1](v), lambda v: v),
    "think_s": _NON_NEGATIVE,
}
_CLIENT_KINDS: dict[str, _Kind] = {
    "read": _one_of(ReadMode),
    "pause_s": _NON_NEGATIVE,
    "bytes_per_s": _NON_NEGATIVE,
    "leave_after_tokens": _COUNT_OR_NULL,
    "leave_after_s": _SECONDS_OR_NULL,
    "leave_how": _one_of(LeaveHow),
}


def _take(obj: dict, kinds: dict[str, _Kind], prefix: str = "") -> dict[str, Any]:
    for name in obj:
        if name not in kinds:
            near = difflib.get_close_matches(name, kinds, n=1)
            hint = f"did you mean '{prefix}{near[0]}'?" if near else "known: " + ", ".join(kinds)
            raise FieldError(prefix + name, f"is not a trace field ({hint})")
    values = {}
    for name, value in obj.items():
        what, ok, convert = kinds[name]
        if not ok(value):
            raise FieldError(prefix + name, f"must be {what}, got {shown(value)}")
        values[name] = convert(value)
    return values


def parse_client(obj: object) -> Client:
    if not isinstance(obj, dict):
        raise FieldError("client", f"must be an object, got {shown(obj)}")
    client = Client(**_take(obj, _CLIENT_KINDS, "client."))
    # A setting that cannot take effect is almost always a mistake in the file.
    for name, mode in (("pause_s", ReadMode.PER_EVENT), ("bytes_per_s", ReadMode.BYTE_RATE)):
        if client.read is mode and getattr(client, name) <= 0:
            raise FieldError(f"client.{name}", f'must be positive when client.read is "{mode.value}"')
        if client.read is not mode and name in obj:
            raise FieldError(f"client.{name}", f'applies only when client.read is "{mode.value}"')
    if "leave_how" in obj and not client.leaves:
        raise FieldError("client.leave_how",
                         "applies only to a client that leaves (set leave_after_tokens or leave_after_s)")
    return client


def parse_request(obj: object) -> TraceRequest:
    """One decoded JSON line as a request; raises FieldError naming the field."""
    if not isinstance(obj, dict):
        raise FieldError(None, f"a request must be a JSON object, got {shown(obj)}")
    for name in _REQUIRED:
        if name not in obj:
            raise FieldError(name, "is required")
    rest = {k: v for k, v in obj.items() if k != "client"}
    values = _take(rest, _REQUEST_KINDS)
    if "client" in obj:
        values["client"] = parse_client(obj["client"])
    return TraceRequest(**values)


def _changed(record, default) -> dict[str, Any]:
    """The fields of `record` that differ from `default`, in declaration order."""
    out = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if value != getattr(default, f.name):
            out[f.name] = value.value if isinstance(value, enum.Enum) else value
    return out


def request_json(r: TraceRequest) -> dict[str, Any]:
    """The JSON object for one request: required fields, then those not at their default."""
    default = TraceRequest(id="", arrival_s=0.0, prompt_tokens=1, max_new_tokens=1)
    out = {name: getattr(r, name) for name in _REQUIRED}
    for name, value in _changed(r, default).items():
        if name == "client":
            value = _changed(r.client, Client())
        out.setdefault(name, value)
    return out


class _Order:
    """The checks between lines: ids are unique (unless told not to look, which
    holds no id), arrivals never go back in time."""

    def __init__(self, unique_ids: bool = True):
        self.seen: dict[str, int] | None = {} if unique_ids else None
        self.last_arrival = 0.0

    def check(self, r: TraceRequest, line: int) -> None:
        if self.seen is not None and r.id in self.seen:
            raise FieldError("id", f"{shown(r.id)} already used on line {self.seen[r.id]}")
        if r.arrival_s < self.last_arrival:
            raise FieldError("arrival_s", f"is {r.arrival_s}, earlier than the line before "
                                          f"({self.last_arrival}); requests must be in arrival order")
        if self.seen is not None:
            self.seen[r.id] = line
        self.last_arrival = r.arrival_s


def json_lines(path: str | Path) -> Iterator[tuple[int, object]]:
    """The line number and parsed value of every non-blank line of a JSON-lines
    file; bad JSON is an error that names its line."""
    source = Path(path).name
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TraceError.at(source, line_no, f"not valid JSON: {e.msg} (column {e.colno})") from None
            except ValueError as e:  # an integer of more digits than Python reads
                raise TraceError.at(source, line_no, f"not valid JSON: {str(e)[:120]}") from None
            except RecursionError:
                raise TraceError.at(source, line_no, "not valid JSON: nested too deep") from None
            yield line_no, obj


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Every request of a native JSONL trace, in file order. Blank lines are allowed."""
    return list(iter_trace(path))


def count_requests(path: str | Path) -> int:
    """The requests of a native JSONL trace, counted by its non-blank lines, unread."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def iter_trace(path: str | Path, unique_ids: bool = True) -> Iterator[TraceRequest]:
    """The requests of a native JSONL trace one at a time, as `read_trace` reads
    them. `unique_ids=False` holds nothing of the lines before (a trace too long to
    hold: whoever takes the requests checks their ids)."""
    source = Path(path).name
    order = _Order(unique_ids)
    for line_no, obj in json_lines(path):
        try:
            request = parse_request(obj)
            order.check(request, line_no)
        except FieldError as e:
            raise TraceError.at(source, line_no, str(e)) from None
        yield request


def write_trace(path: str | Path, requests: Iterable[TraceRequest]) -> None:
    """Write requests as native JSONL; refuses (before writing) what read_trace would refuse."""
    order = _Order()
    lines = []
    for line_no, r in enumerate(requests, 1):
        obj = request_json(r)
        try:
            line = json.dumps(obj)
            order.check(parse_request(json.loads(line)), line_no)
        except (FieldError, TypeError, ValueError) as e:
            raise TraceError(f"request {r.id!r} (line {line_no} of {Path(path).name}): {e}") from None
        lines.append(line + "\n")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
