"""What happened to one request in a replay, live or simulated: the one schema
both write, so the analysis compares like with like. Times are seconds from the
replay's start.

On disk the records are a Parquet file. pyarrow is imported only where one is
written or read: the simulator's clients and the live load generator import this
module for the dataclass alone."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import pyarrow as pa


COMPLETED = frozenset({"length", "stop", "eos"})
"""Finish reasons of a request that ran to its end."""


class Refusal(StrEnum):
    """Why a request was refused before its stream began, in one vocabulary for the
    live client (from the HTTP status) and the simulator (from the core's refusal)."""

    QUEUE_FULL = "queue_full"
    """429: the waiting queue is full."""
    KEY_LIMIT = "key_limit"
    """429: the request's key holds as many streams or waiting requests as its limit allows."""
    TOO_LARGE = "too_large"
    """422: longer than the model's context or the block pool."""
    INVALID = "invalid"
    """400, 401, 403, 404, 409, 413: the request itself is wrong (its key too)."""
    UNAVAILABLE = "unavailable"
    """503: the server is shutting down or its engine has stopped."""
    SERVER_ERROR = "server_error"
    """Any other status: the server failed."""
    UNREACHABLE = "unreachable"
    """No connection (live only)."""


@dataclass(slots=True)
class RequestOutcome:
    id: str
    arrival_s: float
    prompt_tokens: int
    max_new_tokens: int
    admitted_s: float | None = None
    first_token_engine_s: float | None = None
    """When the engine made the first token (end of its prefill step)."""
    headers_s: float | None = None
    """When the client received the response headers; None when none came."""
    first_token_client_s: float | None = None
    """When the client received the first token event."""
    token_times_s: list[float] = field(default_factory=list)
    """When the client received each token event it read."""
    finish_s: float | None = None
    finish_reason: str | None = None
    tokens_generated: int = 0
    tokens_read: int = 0
    tokens_after_leave: int = 0
    """Tokens the engine made after the client had left: wasted work."""
    left_s: float | None = None
    refused: str | None = None
    """A `Refusal` value, if the request was refused before its stream began."""

    @property
    def ttft_client_s(self) -> float | None:
        if self.first_token_client_s is None:
            return None
        return self.first_token_client_s - self.arrival_s

    @property
    def ttft_engine_s(self) -> float | None:
        if self.first_token_engine_s is None:
            return None
        return self.first_token_engine_s - self.arrival_s

    @property
    def gaps_s(self) -> list[float]:
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])]


ROWS_PER_GROUP = 8192
"""Outcomes a writer holds before it writes them as one row group of the file."""

PARQUET_MAGIC = b"PAR1"
"""The first bytes of a Parquet file; records written before Parquet are JSON lines."""


class OutcomeWriter:
    """Writes outcomes to a Parquet file as they come, in the order written, one row
    a request and a column a field of `RequestOutcome` (named alike; None as null),
    holding at most `rows_per_group` of them, so that a replay of any length writes
    its records in bounded memory. The token times, nearly all of a file, are a
    `list<float64>` column; `token_times=False` leaves that column out, and its
    records read back with empty lists. Columns are zstd-compressed, floats split by
    byte first (times a few milliseconds apart share their high bytes)."""

    def __init__(self, path: str | Path, token_times: bool = True,
                 rows_per_group: int = ROWS_PER_GROUP) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.schema = outcome_schema(token_times)
        self.rows_per_group = rows_per_group
        self._pending: list[RequestOutcome] = []
        floats = [f.name for f in self.schema if f.type == pa.float64()]
        if token_times:
            floats.append("token_times_s.list.element")
        self._file = pq.ParquetWriter(path, self.schema, compression="zstd",
                                      use_dictionary=["finish_reason", "refused"],
                                      use_byte_stream_split=floats)

    def write(self, outcome: RequestOutcome) -> None:
        self._pending.append(outcome)
        if len(self._pending) >= self.rows_per_group:
            self.flush()

    def flush(self) -> None:
        """Writes what is held as one row group."""
        if self._pending:
            self._file.write_table(outcome_table(self._pending, self.schema),
                                   row_group_size=len(self._pending))
            self._pending = []

    def close(self) -> None:
        self.flush()
        self._file.close()

    def __enter__(self) -> OutcomeWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_outcomes(path: str | Path, outcomes: Iterable[RequestOutcome],
                   token_times: bool = True) -> None:
    with OutcomeWriter(path, token_times) as writer:
        for o in outcomes:
            writer.write(o)


def read_outcomes(path: str | Path) -> list[RequestOutcome]:
    """Records as `write_outcomes` wrote them, floats to the bit; a JSON-lines file
    of an older run reads too. A field added since a file was written takes its
    default."""
    if not _is_parquet(path):
        with open(path) as f:
            return [RequestOutcome(**json.loads(line)) for line in f if line.strip()]
    table = read_outcome_table(path)
    names = [f.name for f in fields(RequestOutcome) if f.name in table.column_names]
    columns = [table.column(name).to_pylist() for name in names]
    return [RequestOutcome(**dict(zip(names, row))) for row in zip(*columns)]


def read_outcome_table(path: str | Path) -> pa.Table:
    """The records as a `pyarrow.Table`, a column a field, for analysis that wants
    whole columns rather than a list of objects: `table["arrival_s"].to_numpy()`,
    or `table["token_times_s"].combine_chunks().values` for every token time in one
    array (the column is absent when written without token times). A JSON-lines
    file of an older run reads as the same table."""
    import pyarrow.parquet as pq

    if _is_parquet(path):
        return pq.read_table(path)
    return outcome_table(read_outcomes(path), outcome_schema(token_times=True))


def outcome_schema(token_times: bool) -> pa.Schema:
    """The Parquet schema of the records, from `RequestOutcome`'s fields."""
    import pyarrow as pa

    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(),
             "list[float]": pa.list_(pa.float64())}
    return pa.schema([(f.name, types[f.type.removesuffix(" | None")])
                      for f in fields(RequestOutcome) if token_times or f.name != "token_times_s"])


def outcome_table(outcomes: list[RequestOutcome], schema: pa.Schema) -> pa.Table:
    """The outcomes as the columns of `schema`."""
    import pyarrow as pa

    return pa.table({f.name: pa.array([getattr(o, f.name) for o in outcomes], f.type)
                     for f in schema}, schema=schema)


def _is_parquet(path: str | Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC
