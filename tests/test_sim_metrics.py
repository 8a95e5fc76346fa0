"""The summary from per-request outcomes, as analysis applies it to live records."""
import pytest

from sim import TimeSeries, format_summary, summarize
from traces.outcome import RequestOutcome


def outcome(id, arrival, times, finish, reason, generated, engine_first=None, **kw):
    return RequestOutcome(id, arrival, 10, 20, first_token_engine_s=engine_first,
                          first_token_client_s=times[0] if times else None, token_times_s=times,
                          finish_s=finish, finish_reason=reason, tokens_generated=generated,
                          tokens_read=len(times), **kw)


OUTCOMES = [
    outcome("a", 0.0, [1.0, 2.0, 4.0], 4.5, "length", 3, engine_first=0.5),
    outcome("b", 1.0, [3.0, 3.5], 3.5, "cancelled", 6, engine_first=2.0, left_s=3.5,
            tokens_after_leave=4),
    outcome("c", 2.0, [], 2.0, None, 0, refused="queue_full"),
    outcome("d", 2.0, [5.0, 5.5], 8.0, "slow_client", 5, engine_first=4.0),
]


def test_summary_from_outcomes_alone():
    s = summarize(OUTCOMES)
    assert (s.requests, s.completed, s.refused, s.left, s.dropped) == (4, 1, 1, 1, 1)
    # client TTFT: 1, 2, 3; engine TTFT: 0.5, 1, 2
    assert (s.ttft_client_p50_s, s.ttft_client_p90_s) == (2.0, pytest.approx(2.8))
    assert (s.ttft_engine_p50_s, s.ttft_engine_p99_s) == (1.0, pytest.approx(1.98))
    # gaps: 1, 2 (a), 0.5 (b), 0.5 (d)
    assert (s.gap_p50_s, s.gap_p99_s) == (0.75, pytest.approx(1.97))
    assert s.e2e_p50_s == s.e2e_p99_s == 4.5  # completed requests only
    assert (s.tokens_generated, s.tokens_read, s.wasted_tokens) == (14, 7, 4)
    assert (s.makespan_s, s.throughput_tok_s) == (8.0, 14 / 8.0)
    assert s.peak_running is None


def test_the_time_series_adds_peaks_and_can_extend_the_makespan():
    series = TimeSeries()
    series.record(1.0, 3, 5, 0, 40, 3)
    series.record(9.0, 1, 0, 2, 12, 1)
    s = summarize(OUTCOMES, series)
    assert (s.peak_running, s.peak_waiting, s.peak_paused, s.peak_blocks_reserved) == (3, 5, 2, 40)
    assert s.makespan_s == 9.0
    assert series.rows()[1] == {"time_s": 9.0, "running": 1, "waiting": 0, "paused": 2,
                                "blocks_reserved": 12, "tokens": 1}


def test_an_empty_replay_summarises_to_nothing():
    s = summarize([])
    assert (s.requests, s.makespan_s, s.throughput_tok_s, s.ttft_client_p50_s) == (0, 0.0, None, None)
    assert "ttft_client_p50_s" in format_summary(s)
