"""The one error a trace that cannot be read raises."""
import json


class TraceError(ValueError):
    """A trace file, or an option for reading one, that makes no sense. The message
    names the file, the line and the field, so the user can go and fix it."""

    @classmethod
    def at(cls, source: str, line: int, problem: str) -> "TraceError":
        return cls(f"{source} line {line}: {problem}")


SHOWN_CHARS = 80
"""How much of a value an error message quotes: enough to find it in the file."""


def shown(value: object) -> str:
    """A value spelled as in the file (JSON spelling), for error messages, cut
    short when long."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    except RecursionError:
        text = "a value nested too deep to show"
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
