"""The figures a twin run compares, computed by one function for the live and the
simulated replay alike: per-request outcomes, the engine's time series, and the
tokens made after clients left."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sim import TimeSeries
from sim.metrics import COMPLETED
from traces.outcome import RequestOutcome


@dataclass(frozen=True)
class Figures:
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    gap_p50_s: float
    gap_p99_s: float
    e2e_p50_s: float
    e2e_p99_s: float
    throughput_tok_s: float
    makespan_s: float
    wasted_tokens: int
    peak_running: int
    peak_waiting: int
    tokens_generated: int
    completed: int
    left: int

    def as_dict(self) -> dict:
        return asdict(self)


def figures(outcomes: list[RequestOutcome], series: TimeSeries, wasted_tokens: int) -> Figures:
    """TTFT and gaps as the clients saw them; end-to-end over requests whose client
    read them to the end; makespan from the first arrival to the last thing a
    client saw; throughput as the engine's tokens over that makespan."""
    ttft = [o.ttft_client_s for o in outcomes if o.first_token_client_s is not None]
    gaps = np.concatenate([np.diff(o.token_times_s) for o in outcomes if len(o.token_times_s) > 1]
                          or [np.zeros(0)])
    done = [o for o in outcomes if o.finish_reason in COMPLETED and o.left_s is None]
    e2e = [o.finish_s - o.arrival_s for o in done]
    ends = [t for o in outcomes for t in (o.finish_s, o.left_s) if t is not None]
    makespan = max(ends) - min(o.arrival_s for o in outcomes)
    tokens = sum(series.tokens)
    return Figures(
        *_pct(ttft, (50, 90, 99)), *_pct(gaps, (50, 99)), *_pct(e2e, (50, 99)),
        throughput_tok_s=tokens / makespan, makespan_s=makespan, wasted_tokens=wasted_tokens,
        peak_running=series.peak("running"), peak_waiting=series.peak("waiting"),
        tokens_generated=tokens, completed=len(done),
        left=sum(o.left_s is not None for o in outcomes))


def _pct(values, qs) -> list[float]:
    if len(values) == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(values, qs)]
