"""Request latency by RPC and error code: a Prometheus histogram that costs next to nothing to
observe, because every heartbeat observes it.

``prometheus_client``'s ``Histogram.observe`` takes a lock and updates a bucket and the sum
through two locked values: about 2 µs a call here, a tenth of a heartbeat's whole cost in the
coordinator. Observations come from one thread (the event loop: answers are given there), so a
child here is a list of bucket counts and a float, updated without a lock; a scrape (another
thread) copies them and exports the same series a ``Histogram`` would (``_bucket``, ``_count``,
``_sum``; no ``_created``). A scrape racing an observation may see the sum one observation
ahead of the counts, which Prometheus tolerates as it tolerates any scrape between two requests.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["RequestLatency"]


class _Child:
    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf only)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """One observation (from the event loop's thread)."""
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value


class RequestLatency(Collector):
    """A labelled histogram (``labels(rpc=..., code=...).observe(seconds)``) registered on ``registry``."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._children: dict[tuple[str, str], _Child] = {}
        registry.register(self)

    def labels(self, *, rpc: str, code: str) -> _Child:
        child = self._children.get((rpc, code))
        if child is None:
            child = self._children[(rpc, code)] = _Child(self._bounds)
        return child

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=["rpc", "code"])]

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=["rpc", "code"])
        for (rpc, code), child in list(self._children.items()):
            counts, total = list(child.counts), child.total
            buckets: list[tuple[str, float]] = []
            running = 0
            for bound, count in zip(self._bounds, counts, strict=False):
                running += count
                buckets.append((repr(bound), running))  # as Prometheus writes them: "0.0005", "1.0"
            buckets.append(("+Inf", running + counts[-1]))
            family.add_metric([rpc, code], buckets, total)
        yield family
