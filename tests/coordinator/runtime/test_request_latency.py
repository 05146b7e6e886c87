"""The lock-free request histogram exports what ``prometheus_client``'s Histogram would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from groupcoord.coordinator.runtime.metrics import REQUEST_BUCKETS
from groupcoord.coordinator.runtime.request_latency import RequestLatency


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples if not s.name.endswith("_created")}


def test_same_series_as_a_prometheus_histogram() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = RequestLatency("req_seconds", "doc", REQUEST_BUCKETS, ours)
    slow = Histogram("req_seconds", "doc", ["rpc", "code"], buckets=REQUEST_BUCKETS, registry=theirs)
    observations = [("Heartbeat", "NONE", v) for v in (0.0001, 0.0005, 0.0007, 0.001, 0.3, 400.0)]
    observations += [("JoinGroup", "MEMBER_ID_REQUIRED", 0.002)]
    for rpc, code, value in observations:
        fast.labels(rpc=rpc, code=code).observe(value)
        slow.labels(rpc=rpc, code=code).observe(value)
    assert _samples(ours) == _samples(theirs)
    assert b'req_seconds_bucket{code="NONE",le="0.0005",rpc="Heartbeat"} 2.0' in generate_latest(ours)


def test_described_before_any_observation() -> None:
    registry = CollectorRegistry()
    RequestLatency("req_seconds", "doc", REQUEST_BUCKETS, registry)
    assert [f.name for f in registry.collect()] == ["req_seconds"]
