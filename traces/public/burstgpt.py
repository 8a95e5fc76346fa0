"""BurstGPT (Wang et al., 2024): CSV `Timestamp,Model,Request tokens,Response
tokens,Total tokens,Log Type`, Timestamp in seconds from the trace's start. Model
is e.g. `ChatGPT` or `GPT-4`, Log Type `Conversation log` or `API log`.

Rows with 0 response tokens are failed requests and are skipped (as every public
loader skips rows with a zero length); time zero stays the file's earliest row, so
a model or log-type filter does not move the timeline.
"""
from __future__ import annotations

from pathlib import Path

from ..record import TraceRequest
from ..shaping import shape
from .rows import PublicRow, csv_rows, requests_from_rows, seconds, token_count

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Log Type")


def load_burstgpt(path: str | Path, *, model: str | None = None, log_type: str | None = None,
                  **options) -> list[TraceRequest]:
    """Requests of a BurstGPT trace, only those of `model` and `log_type` when given
    (exact, case-sensitive match); `options` are those of `shape`."""
    source = Path(path).name
    rows, origin = [], None
    for index, (line, cells) in enumerate(csv_rows(path, COLUMNS)):
        t = seconds(cells["Timestamp"], source, line, "Timestamp")
        origin = t if origin is None else min(origin, t)
        if (model is None or cells["Model"] == model) and (log_type is None or cells["Log Type"] == log_type):
            rows.append(PublicRow(index, t,
                                  token_count(cells["Request tokens"], source, line, "Request tokens"),
                                  token_count(cells["Response tokens"], source, line, "Response tokens")))
    return shape(requests_from_rows(rows, origin=origin), **options)
