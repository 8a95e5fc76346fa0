"""How the client reads a refusal: the `Refusal` its status (and, for a 429, its
envelope) means, in the vocabulary the simulator records too, and the message of
its JSON error envelope."""
from __future__ import annotations

import json

from traces.outcome import Refusal

_BY_STATUS = {429: Refusal.QUEUE_FULL, 422: Refusal.TOO_LARGE, 400: Refusal.INVALID,
              401: Refusal.INVALID, 403: Refusal.INVALID, 404: Refusal.INVALID, 409: Refusal.INVALID, 413: Refusal.INVALID,
              503: Refusal.UNAVAILABLE}


def refusal_for(status: int, body: bytes = b"") -> Refusal:
    """Why a request answered with `status` (not 200) and `body` was refused: a
    429 is a key's limit when its envelope says so (type or code `key_limit`), else
    a full queue."""
    if status == 429 and Refusal.KEY_LIMIT.value in _error_names(body):
        return Refusal.KEY_LIMIT
    return _BY_STATUS.get(status, Refusal.SERVER_ERROR)


def _error_names(body: bytes) -> set:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return set()
    return {error.get("type"), error.get("code")} if isinstance(error, dict) else set()


def refusal_message(status: int, body: bytes) -> str:
    """"<status> <message>", the message taken from the JSON error envelope."""
    message = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(message)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict):
            error = error.get("message") or error.get("detail") or error
        message = error if isinstance(error, str) else json.dumps(error)
    return f"{status} {message[:300]}"
