"""The summary of a trace: exact figures on a small one."""
import pytest

from traces import Client, ReadMode, TraceRequest, format_stats, trace_stats

TRACE = [
    TraceRequest("a", 0.0, 10, 1),
    TraceRequest("b", 1.0, 20, 2, client=Client(read=ReadMode.PER_EVENT, pause_s=0.5)),
    TraceRequest("c", 4.0, 30, 3, client=Client(leave_after_s=1.0)),
]


def test_figures():
    s = trace_stats(TRACE)
    assert (s.count, s.duration_s, s.mean_rate_per_s) == (3, 4.0, 0.5)
    assert (s.prompt.mean, s.prompt.p50, s.prompt.max) == (20.0, 20.0, 30)
    assert s.prompt.p90 == pytest.approx(28.0) and s.prompt.p99 == pytest.approx(29.8)
    assert (s.output.mean, s.output.max) == (2.0, 3)
    assert s.slow_fraction == pytest.approx(1 / 3) and s.leave_fraction == pytest.approx(1 / 3)


def test_table():
    assert format_stats(trace_stats(TRACE)).splitlines() == [
        "requests        3",
        "duration_s      4.000",
        "mean_rate_per_s 0.500",
        "slow_fraction   0.333",
        "leave_fraction  0.333",
        "",
        "tokens        mean       p50       p90       p99       max",
        "prompt        20.0      20.0      28.0      29.8        30",
        "output         2.0       2.0       2.8       3.0         3",
    ]


def test_empty_and_single_request_traces_have_no_rate():
    assert trace_stats([]).count == 0 and trace_stats([]).mean_rate_per_s is None
    assert "mean_rate_per_s -" in format_stats(trace_stats([]))
    assert trace_stats(TRACE[:1]).mean_rate_per_s is None
