"""Errors the core raises. Refusals at submit share one base so a server can turn
any of them into a response before the first byte."""


class SubmitRefused(Exception):
    """A request the core will not take."""


class InvalidRequest(SubmitRefused, ValueError):
    """Lengths that make no sense (no prompt, no tokens to make, duplicate id)."""


class RequestTooLarge(SubmitRefused):
    """The request could never fit: over the model's context or the whole pool."""


class QueueFull(SubmitRefused):
    """The waiting queue is at its limit; the caller may retry later."""


class KeyLimitReached(SubmitRefused):
    """The request's key holds as many streams, or waiting requests, as it may; the
    caller may retry once one of them ends."""

    def __init__(self, key: str, what: str, limit: int):
        super().__init__(f"the key {key!r} holds {limit} {what} already, its limit")
        self.key = key
        self.what = what
        self.limit = limit

    def __reduce__(self):
        # the refusal crosses from an engine in its own process
        return type(self), (self.key, self.what, self.limit)


class DoubleRelease(RuntimeError):
    """A sequence's blocks were released a second time."""

    def __init__(self, seq_id: str):
        super().__init__(f"blocks of sequence {seq_id!r} released twice (or never reserved)")
        self.seq_id = seq_id


class InvariantBroken(RuntimeError):
    """The core's own bookkeeping disagrees with itself."""
