"""How a profile is named after the server it was measured on: its hardware
(as the server describes it), model and dtype."""
from __future__ import annotations

import re
from pathlib import Path

from live.runner.models import EMBEDDED_NAME

SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def short_dtype(dtype: str) -> str:
    return SHORT_DTYPES[dtype]


def profile_name(hardware: str, model: str, dtype: str) -> str:
    return f"{slug(hardware)}-{slug(model)}-{short_dtype(dtype)}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def model_name(spec: str | None) -> str:
    """The name a server gives the model of `--model spec` (a .gguf file's stem, a
    directory's name), known before it loads."""
    if spec is None:
        return EMBEDDED_NAME
    path = Path(spec)
    return path.stem if spec.endswith(".gguf") else path.name
