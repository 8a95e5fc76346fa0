"""The one summary of per-request outcomes that the simulator, the live load
generator and the comparison all use: exact figures from hand-made outcomes."""
import numpy as np
import pytest

from sim import TimeSeries, summarize_replay
from traces.outcome import RequestOutcome
from traces.percentiles import Percentiles
from traces.summary import Tally, format_summary, summarize


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
    # gaps: 1, 2 (a), 0.5 (b), 0.5 (d); each stream's longest: 2, 0.5, 0.5
    assert (s.gap_p50_s, s.gap_p99_s) == (0.75, pytest.approx(1.97))
    assert (s.stall_p50_s, s.stall_p99_s) == (0.5, pytest.approx(1.97))
    assert s.e2e_p50_s == s.e2e_p99_s == 4.5  # completed requests only
    assert (s.tokens_generated, s.tokens_read, s.wasted_tokens) == (14, 7, 4)
    assert (s.makespan_s, s.throughput_tok_s) == (8.0, 14 / 8.0)
    assert (s.peak_running, s.peak_blocks_reserved) == (None, None)


def test_gaps_never_span_two_streams():
    # Laid end to end, 1.0 -> 10.0 would be a gap of 9 s that no client saw.
    s = summarize([outcome("a", 0.0, [0.0, 1.0], 1.0, "length", 2),
                   outcome("b", 0.0, [10.0, 10.5], 10.5, "length", 2),
                   outcome("c", 0.0, [12.0], 12.0, "length", 1)])
    # gaps: 1 (a), 0.5 (b); c has none
    assert (s.gap_p50_s, s.gap_p99_s) == (0.75, pytest.approx(0.995))
    assert (s.stall_p50_s, s.stall_p99_s) == (0.75, pytest.approx(0.995))


def test_gaps_pooled_and_spilled_to_a_file_summarise_to_the_same_floats(monkeypatch):
    rng = np.random.default_rng(5)
    streams = [outcome(str(i), 0.0, sorted(rng.uniform(0, 9, rng.integers(0, 7)).tolist()), 9.0,
                       "length", 6) for i in range(41)]
    gaps = [b - a for o in streams for a, b in zip(o.token_times_s, o.token_times_s[1:])]
    stalls = [max(b - a for a, b in zip(o.token_times_s, o.token_times_s[1:]))
              for o in streams if len(o.token_times_s) > 1]
    whole = summarize(streams)
    assert (whole.gap_p50_s, whole.gap_p99_s) == tuple(np.percentile(gaps, (50, 99)))
    assert (whole.stall_p50_s, whole.stall_p99_s) == tuple(np.percentile(stalls, (50, 99)))
    monkeypatch.setattr(Percentiles.__init__, "__defaults__", (7,))  # every 7 values to the file
    tally = Tally.of(reversed(streams))
    assert tally.gaps._file is not None and tally.summary() == whole
    tally.close()


def test_makespan_ends_when_the_last_client_is_done_with_its_request():
    # A live client that leaves records no finish, and a refused one only headers:
    # their leaving and their answer are when they were done.
    left = outcome("a", 1.0, [2.0], None, None, 1, left_s=6.0)
    refused = outcome("b", 3.0, [], None, None, 0, headers_s=7.5, refused="queue_full")
    read = outcome("c", 2.0, [3.0, 4.0], 5.0, "length", 2)
    assert summarize([left, read]).makespan_s == 5.0  # 1.0 to 6.0
    assert summarize([left, refused, read]).makespan_s == 6.5  # 1.0 to 7.5
    # the same leaver as the simulator records it, with finish_s = left_s
    simulated = outcome("a", 1.0, [2.0], 6.0, "cancelled", 1, left_s=6.0)
    assert summarize([simulated, read]).makespan_s == 5.0


def test_live_and_simulated_records_of_the_same_replay_summarise_alike():
    live = [outcome("a", 0.0, [1.0, 1.5], None, None, 2, left_s=1.5, headers_s=0.1),
            outcome("b", 0.5, [], None, None, 0, headers_s=0.6, refused="queue_full"),
            outcome("c", 0.5, [1.0, 2.0, 3.0], 3.25, "length", 3, headers_s=0.6)]
    simulated = [outcome("a", 0.0, [1.0, 1.5], 1.5, "cancelled", 2, left_s=1.5, headers_s=0.1),
                 outcome("b", 0.5, [], 0.6, None, 0, headers_s=0.6, refused="queue_full"),
                 outcome("c", 0.5, [1.0, 2.0, 3.0], 3.25, "length", 3, headers_s=0.6)]
    assert summarize(live, wasted_tokens=1) == summarize(simulated, wasted_tokens=1)
    assert summarize(live).makespan_s == 3.25


def test_the_engine_counts_given_replace_the_outcomes_own():
    # A live client knows neither the tokens made after it left nor their count.
    s = summarize(OUTCOMES, tokens_generated=20, wasted_tokens=7)
    assert (s.tokens_generated, s.wasted_tokens, s.throughput_tok_s) == (20, 7, 2.5)
    assert summarize(OUTCOMES, wasted_tokens=0).wasted_tokens == 0  # 0 is a count, not "none"
    assert s.tokens_read == 7  # what the clients read stays theirs


@pytest.mark.parametrize("given", [{"tokens_generated": -1}, {"wasted_tokens": -3}])
def test_a_negative_count_is_refused(given):
    with pytest.raises(ValueError, match=next(iter(given))):
        summarize(OUTCOMES, **given)


def test_a_replay_with_its_time_series_takes_tokens_and_peaks_from_the_engine():
    series = TimeSeries()
    series.record(1.0, 3, 5, 0, 40, 3)
    series.record(9.0, 1, 0, 2, 12, 1)
    s = summarize_replay(Tally.of(OUTCOMES), series, preemptions=3, recomputed_tokens=70)
    assert (s.peak_running, s.peak_waiting, s.peak_paused, s.peak_blocks_reserved) == (3, 5, 2, 40)
    assert (s.tokens_generated, s.preemptions, s.recomputed_tokens) == (4, 3, 70)
    assert s.wasted_tokens == sum(o.tokens_after_leave for o in OUTCOMES)
    # the engine's last step at 9.0 is not a client's: the makespan stays 8
    assert (s.makespan_s, s.throughput_tok_s) == (8.0, 0.5)


def test_an_empty_replay_summarises_to_nothing():
    s = summarize([])
    assert (s.requests, s.completed, s.tokens_generated, s.wasted_tokens) == (0, 0, 0, 0)
    assert (s.makespan_s, s.throughput_tok_s, s.ttft_client_p50_s, s.gap_p50_s) == (0.0, None, None, None)
    lines = format_summary(s).splitlines()
    assert len(lines) == len(s.as_dict())
    assert lines[0].split() == ["requests", "0"]
    assert lines[5].split() == ["ttft_client_p50_s", "-"]
