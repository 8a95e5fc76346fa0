"""Cutting a trace down for a replay: window, sample, first N, time scale, caps."""
import pytest

from traces import Client, TraceError, TraceRequest, shape

TRACE = [TraceRequest(str(i), float(i), 100 * (i + 1), 10 * (i + 1)) for i in range(10)]


def ids(requests):
    return [r.id for r in requests]


def test_no_options_changes_nothing():
    assert shape(TRACE) == TRACE


def test_time_scale_multiplies_the_gaps():
    assert [r.arrival_s for r in shape(TRACE[:4], time_scale=0.5)] == [0.0, 0.5, 1.0, 1.5]
    assert [r.arrival_s for r in shape(TRACE[:3], time_scale=3)] == [0.0, 3.0, 6.0]


def test_window_keeps_its_arrivals_and_starts_at_zero():
    window = shape(TRACE, start_s=2.5, end_s=6.0)
    assert ids(window) == ["3", "4", "5"]
    assert [r.arrival_s for r in window] == [0.5, 1.5, 2.5]
    assert ids(shape(TRACE, end_s=2.0)) == ["0", "1"]
    # The window is in the trace's own seconds, before the time scale.
    assert [r.arrival_s for r in shape(TRACE, start_s=8.0, time_scale=2.0)] == [0.0, 2.0]


def test_sample_keeps_that_fraction_in_order_and_is_seeded():
    kept = shape(TRACE, sample=0.3, seed=4)
    assert len(kept) == 3
    assert ids(kept) == sorted(ids(kept), key=int)
    assert kept == shape(TRACE, sample=0.3, seed=4)
    many = [TraceRequest(str(i), float(i), 1, 1) for i in range(1000)]
    assert ids(shape(many, sample=0.5, seed=1)) != ids(shape(many, sample=0.5, seed=2))


def test_limit_is_applied_after_the_window_and_sample():
    assert ids(shape(TRACE, limit=3)) == ["0", "1", "2"]
    assert ids(shape(TRACE, start_s=5.0, limit=2)) == ["5", "6"]
    assert ids(shape(TRACE, sample=0.5, seed=0, limit=2)) == ids(shape(TRACE, sample=0.5, seed=0))[:2]


def test_caps_clamp_lengths_and_keep_everything_else():
    slow = TraceRequest("s", 1.0, 5000, 900, temperature=0.5, client=Client(leave_after_tokens=3))
    [capped] = shape([slow], max_prompt_tokens=2000, max_new_tokens=64)
    assert capped == TraceRequest("s", 1.0, 2000, 64, temperature=0.5, client=Client(leave_after_tokens=3))
    assert [(r.prompt_tokens, r.max_new_tokens) for r in shape(TRACE[:3], max_new_tokens=15)] == [
        (100, 10), (200, 15), (300, 15)]


@pytest.mark.parametrize("options, problem", [
    ({"time_scale": 0}, "time_scale must be positive"),
    ({"start_s": 5, "end_s": 5}, "end_s (5) must be after start_s (5)"),
    ({"limit": 0}, "limit must be a positive number"),
    ({"sample": 1.5}, "sample must be a fraction in (0, 1]"),
    ({"max_new_tokens": 0}, "max_new_tokens must be a positive number of tokens"),
])
def test_bad_options_are_refused(options, problem):
    with pytest.raises(TraceError) as caught:
        shape(TRACE, **options)
    assert problem in str(caught.value)
