"""The loop's own histogram writes exactly what prometheus_client's histogram
writes for the same observations: buckets (a value on a bound counts in it),
count and sum, in the text exposition."""
import re

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from live.streams.loop_histogram import LoopHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0)


def exposition(registry) -> str:
    """The text, each histogram's creation time (a clock reading) left out."""
    return re.sub(r"(_created) \S+", r"\1 T", generate_latest(registry).decode())


def test_the_exposition_is_prometheus_clients_own():
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("gap_seconds", "Gaps", buckets=BUCKETS, registry=theirs)
    histogram = LoopHistogram("gap_seconds", "Gaps", BUCKETS, ours)
    assert exposition(ours) == exposition(theirs)
    for value in (0.0, 0.0005, 0.001, 0.002, 0.01, 0.5, 1.0, 3.0, 1e9):
        reference.observe(value)
        histogram.observe(value)
    assert histogram.counts == [3, 2, 0, 2, 2]
    assert "gap_seconds_created T" in exposition(ours)
    assert exposition(ours) == exposition(theirs)
