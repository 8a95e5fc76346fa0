"""Service-level objectives: the latency targets a request is judged by, as its
client saw it. A summary gives the share of requests that met them (attainment)
and the tokens per second of those that did (goodput), live and simulated alike."""
from __future__ import annotations

from dataclasses import dataclass

from .outcome import COMPLETED, Refusal, RequestOutcome

NOT_JUDGED = frozenset({Refusal.INVALID.value, Refusal.TOO_LARGE.value})
"""Refusals of requests that no server could have served as asked: not judged."""


@dataclass(frozen=True)
class Slo:
    ttft_s: float | None = None
    """Time to first token: from arrival to the first token read."""
    tpot_s: float | None = None
    """Time per output token after the first: from the first token read to the last,
    over the tokens between them."""

    def __post_init__(self):
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("an SLO needs a TTFT or a TPOT target")
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"the SLO's {name} must be positive, got {value}")

    @classmethod
    def given(cls, ttft_s: float | None, tpot_s: float | None) -> Slo | None:
        """The SLO of these targets; None when neither is given."""
        return None if ttft_s is None and tpot_s is None else cls(ttft_s, tpot_s)

    def judges(self, o: RequestOutcome) -> bool:
        """Every request is judged but one whose client chose to leave (what it would
        have seen is unknown) and one refused as invalid or too large for the model.
        Requests refused for load, dropped or failed are judged, and miss."""
        return o.left_s is None and o.refused not in NOT_JUDGED

    def met(self, o: RequestOutcome) -> bool:
        """Read to its end within both targets."""
        if o.finish_reason not in COMPLETED or o.left_s is not None:
            return False
        first = o.first_token_client_s
        if first is None:
            return True  # it ended without a token: no latency to miss
        last = o.token_times_s[-1] if o.token_times_s else o.finish_s
        return self.within(first - o.arrival_s,
                           (last - first) / (o.tokens_read - 1) if o.tokens_read > 1 else None)

    def within(self, ttft_s: float | None, tpot_s: float | None) -> bool:
        """Whether a request that ran to its end with this TTFT and TPOT (None: it
        has none, e.g. a single token has no TPOT) met both targets."""
        return ((self.ttft_s is None or ttft_s is None or ttft_s <= self.ttft_s)
                and (self.tpot_s is None or tpot_s is None or tpot_s <= self.tpot_s))
