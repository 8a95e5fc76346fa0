"""A Prometheus histogram observed from the event loop's thread alone, as the
inter-token gap is for every token: counted without the lock each observation of
prometheus_client's own histogram takes (a few microseconds a token, a fifth of
the loop's time at tens of thousands of tokens a second), and read at a scrape,
on the same thread, in the same exposition."""
from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import HistogramMetricFamily


class LoopHistogram:
    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        """Observations in each bucket, not cumulative; the last is above every bound."""
        self.sum = 0.0
        self.created = time.time()
        registry.register(self)

    def observe(self, value: float) -> None:
        # the bucket whose upper bound is the first at or above the value (le)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def collect(self) -> Iterator[HistogramMetricFamily]:
        cumulative, total = [], 0
        for bound, count in zip(self.bounds + (float("inf"),), self.counts):
            total += count
            cumulative.append((_le(bound), total))
        family = HistogramMetricFamily(self.name, self.documentation, buckets=cumulative,
                                       sum_value=self.sum)
        family.add_sample(self.name + "_created", {}, self.created)
        yield family


def _le(bound: float) -> str:
    """A bucket's bound as prometheus_client writes its own histograms' (`+Inf`, `0.5`)."""
    return "+Inf" if bound == float("inf") else repr(float(bound))
