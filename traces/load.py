"""One entry point for every trace format: look at the file, pick its loader."""
from __future__ import annotations

import json
from pathlib import Path

from .errors import TraceError
from .jsonl import read_trace
from .public import azure, burstgpt, mooncake, vidur
from .public.rows import csv_header
from .record import TraceRequest
from .shaping import shape

SHAPING_OPTIONS = ("time_scale", "start_s", "end_s", "limit", "sample", "seed",
                   "max_prompt_tokens", "max_new_tokens")


def load_native(path: str | Path, **options) -> list[TraceRequest]:
    """A native JSONL trace; `options` are those of `shape`."""
    return shape(read_trace(path), **options)


# name: (loader, the options it takes besides the shaping ones)
FORMATS = {
    "native": (load_native, ()),
    "azure": (azure.load_azure, ()),
    "burstgpt": (burstgpt.load_burstgpt, ("model", "log_type")),
    "mooncake": (mooncake.load_mooncake, ()),
    "vidur": (vidur.load_vidur, ("rate",)),
}


def _first_line(path: str | Path) -> str:
    with open(path, encoding="utf-8-sig") as f:
        return next((line.strip() for line in f if line.strip()), "")


def detect_format(path: str | Path) -> str:
    """JSON lines (by extension, or a first line that opens an object) are Mooncake
    when they carry input_length and output_length, native otherwise (the native
    reader then says exactly what is wrong). CSV is told apart by its header."""
    suffix = Path(path).suffix.lower()
    first = _first_line(path)
    if suffix in (".jsonl", ".json", ".ndjson") or (suffix != ".csv" and first.startswith("{")):
        try:
            keys = json.loads(first)
        except (ValueError, RecursionError):  # the native reader says what is wrong
            return "native"
        mooncake_keys = {"input_length", "output_length"}
        return "mooncake" if isinstance(keys, dict) and mooncake_keys <= keys.keys() else "native"
    header = set(csv_header(path))
    for name, columns in (("azure", azure.COLUMNS), ("burstgpt", burstgpt.COLUMNS),
                          ("vidur", vidur.LENGTHS)):
        if set(columns) <= header:
            return name
    raise TraceError(f"{Path(path).name}: not a known trace format; expected native JSONL, "
                     "Mooncake JSONL, or a CSV with the columns of an Azure, BurstGPT or "
                     f"Vidur trace (header: {first[:200]})")


def load_trace(path: str | Path, *, format: str | None = None, **options) -> list[TraceRequest]:
    """Requests of a trace in any known format (see FORMATS), detected from the file
    unless `format` names it. `options`: those of `shape` (time_scale, start_s, end_s,
    limit, sample, seed, max_prompt_tokens, max_new_tokens), and model / log_type
    for BurstGPT, rate for length-only Vidur files."""
    name = format or detect_format(path)
    if name not in FORMATS:
        raise TraceError(f"unknown trace format {name!r}; known: {', '.join(FORMATS)}")
    loader, own_options = FORMATS[name]
    for option in options:
        if option not in SHAPING_OPTIONS and option not in own_options:
            raise TraceError(f"option {option!r} does not apply to {name} traces")
    return loader(path, **options)
