"""The one error a trace that cannot be read raises."""
import json


class TraceError(ValueError):
    """A trace file, or an option for reading one, that makes no sense. The message
    names the file, the line and the field, so the user can go and fix it."""

    @classmethod
    def at(cls, source: str, line: int, problem: str) -> "TraceError":
        return cls(f"{source} line {line}: {problem}")


def shown(value: object) -> str:
    """A value spelled as in the file (JSON spelling), for error messages."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
