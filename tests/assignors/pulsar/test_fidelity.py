"""Fidelity to upstream Pulsar: cases written from what Pulsar's own tests assert.

- ThresholdShedder counts a usage over 100% as it is (PR #18645 reverted PR #16937);
- the "only 1 broker available" guard is the caller's (``doLoadShedding``), not the strategies';
- RoundRobinBrokerSelector keeps the candidates in the order given;
- ``loadBalancerDistributeBundlesEvenlyEnabled`` (``LoadManagerShared.removeMostServicingBrokersForNamespace``).
"""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.pulsar import (
    LoadBalancerConfig,
    PulsarAvgAssignor,
    PulsarThresholdAssignor,
    PulsarUniformAssignor,
)
from groupcoord.assignors.pulsar.config import MB
from groupcoord.assignors.pulsar.data import BundleData, LocalBrokerData, ResourceUsage
from groupcoord.assignors.pulsar.placement import RoundRobinBrokerSelector, remove_most_servicing
from groupcoord.assignors.pulsar.shedding import AvgShedder, OverloadShedder, ThresholdShedder, UniformLoadShedder
from groupcoord.assignors.pulsar.testing import broker, bundle, load_data, steady_task
from groupcoord.assignors.snapshot import LoadSnapshot, WorkerLoadStats

CONF = LoadBalancerConfig()


def ten_bundles(prefix: str) -> dict[str, BundleData]:
    """Upstream's fixture: bundle-i carries i MB/s in and i MB/s out."""
    return {f"{prefix}bundle-{i}": bundle(mbytes=2 * i) for i in range(1, 11)}


# ---- ThresholdShedder over 100 % ----------------------------------------------------------------


def test_threshold_shedder_counts_usage_over_the_limit_as_it_is() -> None:
    """b1 reports 140% CPU (a mis-set limit) and 20% bandwidth: it is the busiest member.

    avg = (1.40 + 0.60 + 0.50) / 3 = 0.8333; b1 >= avg + 0.10 offloads (1.40 - 0.8333 - 0.10 + 0.05)
    = 51.67% of its 100 MB/s, heaviest first: 40 + 30 MB/s. With the reverted "within limit" figure
    b1 would count 20% and b2 (60% >= 0.433 + 0.10) would shed instead.
    """
    sizes = {"b1": [40, 30, 20, 10], "b2": [25, 25], "b3": [25, 25]}
    cluster = {
        "b1": broker(cpu=140, bandwidth_in=20, bundles={f"b1-{i}": bundle(mbytes=s) for i, s in enumerate(sizes["b1"])}),
        "b2": broker(cpu=60, bundles={f"b2-{i}": bundle(mbytes=s) for i, s in enumerate(sizes["b2"])}),
        "b3": broker(cpu=50, bundles={f"b3-{i}": bundle(mbytes=s) for i, s in enumerate(sizes["b3"])}),
    }
    shedder = ThresholdShedder()
    assert shedder.find_bundles_for_unloading(load_data(cluster), CONF) == {"b1": ["b1-0", "b1-1"]}
    assert shedder.broker_avg_resource_usage["b1"] == pytest.approx(1.40)


def test_threshold_shedder_member_at_1000_percent_sheds_only_its_own_tasks() -> None:
    """Upstream's multiple-bundles case: broker-1 at 1000% CPU, broker2 idle with the same bundles."""
    b1, own = broker(cpu=1000, memory=5000, direct_memory=5000, bandwidth_in=99.9, bandwidth_out=99.9,
                     bundles=ten_bundles(""))
    b2, other = broker(bundles=ten_bundles("broker2-"))
    result = ThresholdShedder().find_bundles_for_unloading(load_data({"broker-1": (b1, own), "broker2": (b2, other)}), CONF)
    assert list(result) == ["broker-1"]
    # 10.0 - 5.0 - 0.10 + 0.05 of 110 MB/s is more than broker-1 carries: every bundle, heaviest first
    assert result["broker-1"] == [f"bundle-{i}" for i in range(10, 0, -1)]


def test_weighted_usage_keeps_values_over_100() -> None:
    local = LocalBrokerData(cpu=ResourceUsage(140, 100), bandwidth_in=ResourceUsage(20, 100))
    assert local.max_resource_usage_with_weight(1, 1, 1, 1) == pytest.approx(1.40)


# ---- the one-member guard belongs to the caller --------------------------------------------------


def test_overload_shedder_on_one_member_returns_candidates() -> None:
    """Upstream's recently-unloaded case on a single broker at 99.9% bandwidth: 0.999 - 0.85 + 0.05 of
    110 MB/s = 21.9 MB/s; bundle-10 and -9 were recently unloaded, so bundle-8 (16) and -7 (14)."""
    ld = load_data({"broker-1": broker(bandwidth_in=99.9, bandwidth_out=99.9, bundles=ten_bundles(""))},
                   recently_unloaded={"bundle-10": 1.0, "bundle-9": 1.0})
    assert OverloadShedder().find_bundles_for_unloading(ld, CONF) == {"broker-1": ["bundle-8", "bundle-7"]}


def test_overload_shedder_two_members_heaviest_first() -> None:
    """Upstream's multiple-bundles case: another broker's bundles are never picked for broker-1."""
    ld = load_data({
        "broker-1": broker(bandwidth_in=99.9, bandwidth_out=99.9, bundles=ten_bundles("")),
        "another-broker": broker(bundles=ten_bundles("another-")),
    })
    assert OverloadShedder().find_bundles_for_unloading(ld, CONF) == {"broker-1": ["bundle-10", "bundle-9"]}


@pytest.mark.parametrize("cls", [ThresholdShedder, UniformLoadShedder, AvgShedder])
def test_other_shedders_on_one_member_find_nothing_by_their_own_rules(cls: type) -> None:
    """One member is its own average / its own min and max: nothing to move, without any guard."""
    ld = load_data({"b1": broker(cpu=99, bundles={f"x{i}": bundle(rate=9000, mbytes=50) for i in range(5)})})
    assert cls().find_bundles_for_unloading(ld, LoadBalancerConfig(max_unload_percentage=0.5)) == {}


def one_member_context(generation: int) -> AssignmentContext:
    tasks = {f"t{i}": steady_task(f"t{i}", "solo", 5000.0) for i in range(4)}
    snap = LoadSnapshot("g", snapshot_id=f"s{generation}", created_ms=generation, tasks=tasks,
                        workers={"solo": WorkerLoadStats("solo", cpu_usage=99.0, cpu_limit=100.0)})
    owned = tuple(TaskReplica(t) for t in tasks)
    return AssignmentContext("g", generation, (MemberInfo("solo", owned=owned, owned_generation=generation - 1),),
                             tuple(TaskSpec(t) for t in tasks), load_snapshot=snap)


def test_assignor_skips_shedding_with_one_member_and_leaves_the_history_alone() -> None:
    assignor = PulsarThresholdAssignor()
    for generation in (1, 2):
        ctx = one_member_context(generation)
        assert not assignor.needs_rebalance(ctx)
        result = assignor.assign(ctx)
        assert sorted(r.task_id for r in result.members["solo"]) == ["t0", "t1", "t2", "t3"]
        assert assignor.last_round.unloaded == 0
    shedder = assignor._groups.get("g").pools[""].shedder
    assert isinstance(shedder, ThresholdShedder)
    assert shedder.broker_avg_resource_usage == {}  # never called, as doLoadShedding returns first


# ---- RoundRobinBrokerSelector ---------------------------------------------------------------------


def test_round_robin_keeps_the_given_order() -> None:
    rr = RoundRobinBrokerSelector()
    ld = load_data({})
    assert [rr.select_broker(["b3", "b1", "b2"], "t", ld, CONF) for _ in range(4)] == ["b3", "b1", "b2", "b3"]


def test_round_robin_reuses_its_list_until_the_candidates_change() -> None:
    rr = RoundRobinBrokerSelector()
    ld = load_data({})
    assert rr.select_broker(["b1", "b2", "b3"], "t", ld, CONF) == "b1"  # count 0, list cached
    # same size, same members in another order: the cached order is kept
    assert rr.select_broker(["b3", "b2", "b1"], "t", ld, CONF) == "b2"
    # the cached entry at index 2 (b3) is gone: re-read the given list
    assert rr.select_broker(["b4", "b2", "b1"], "t", ld, CONF) == "b1"
    # a different size re-reads too: count 3 % 2 = 1
    assert rr.select_broker(["b9", "b8"], "t", ld, CONF) == "b8"
    assert rr.select_broker([], "t", ld, CONF) is None


# ---- namespace spreading --------------------------------------------------------------------------


def test_remove_most_servicing_as_upstream_asserts() -> None:
    """Upstream's sequence for namespace tenant1/ns1, the counts growing between the calls."""
    counts: dict[str, int] = {}
    assert remove_most_servicing([], counts) == []
    assert remove_most_servicing(["broker1"], counts) == ["broker1"]
    counts["broker1"] = 1
    assert remove_most_servicing(["broker1"], counts) == ["broker1"]
    assert remove_most_servicing(["broker1", "broker2"], counts) == ["broker2"]
    counts["broker2"] = 1
    assert remove_most_servicing(["broker1", "broker2"], counts) == ["broker1", "broker2"]
    counts["broker2"] = 2
    assert remove_most_servicing(["broker1", "broker2"], counts) == ["broker1"]
    counts["broker3"] = 1
    assert remove_most_servicing(["broker1", "broker2", "broker3"], counts) == ["broker1", "broker3"]


def ns_task(task_id: str, namespace: str) -> TaskSpec:
    return TaskSpec(task_id, attributes=MappingProxyType({"namespace": namespace}))


def spreading_context(new: list[TaskSpec]) -> AssignmentContext:
    """a: two ns1 tasks, b: one ns1 task, c: one busy ns2 task (the highest msg rate by far)."""
    owner = {"x1": "a", "x2": "a", "x3": "b", "y1": "c"}
    rates = {"x1": 100.0, "x2": 100.0, "x3": 100.0, "y1": 5000.0}
    tasks = {t: steady_task(t, owner[t], r) for t, r in rates.items()}
    workers = {m: WorkerLoadStats(m, cpu_usage=20.0, cpu_limit=100.0) for m in "abc"}
    snap = LoadSnapshot("g", snapshot_id="s1", created_ms=1, tasks=tasks, workers=workers)
    catalog = [ns_task("x1", "ns1"), ns_task("x2", "ns1"), ns_task("x3", "ns1"), ns_task("y1", "ns2"), *new]
    members = tuple(
        MemberInfo(m, owned=tuple(TaskReplica(t) for t, o in owner.items() if o == m), owned_generation=0) for m in "abc"
    )
    return AssignmentContext("g", 1, members, tuple(catalog), load_snapshot=snap, rng=random.Random(1))


def owned_ids(result_members: dict[str, list[TaskReplica]]) -> dict[str, list[str]]:
    return {m: sorted(r.task_id for r in reps) for m, reps in result_members.items()}


def test_spreading_puts_a_namespace_task_on_the_member_with_fewest_of_it() -> None:
    """x4 (ns1) goes to c, which owns no ns1 task, although c has the highest long-term msg rate."""
    result = PulsarUniformAssignor().assign(spreading_context([ns_task("x4", "ns1")]))
    assert owned_ids(result.members) == {"a": ["x1", "x2"], "b": ["x3"], "c": ["x4", "y1"]}


def test_spreading_off_lets_the_strategy_choose() -> None:
    """Without spreading LeastLongTermMessageRate picks b (200 msg/s, the least)."""
    conf = LoadBalancerConfig(load_balancer_distribute_bundles_evenly_enabled=False)
    result = PulsarUniformAssignor(conf).assign(spreading_context([ns_task("x4", "ns1")]))
    assert owned_ids(result.members) == {"a": ["x1", "x2"], "b": ["x3", "x4"], "c": ["y1"]}


def test_spreading_counts_the_round_s_own_placements() -> None:
    """Three new ns9 tasks in one round land on three distinct members (placements are counted)."""
    new = [ns_task(f"n{i}", "ns9") for i in range(3)]
    result = PulsarUniformAssignor().assign(spreading_context(new))
    holders = sorted(m for m, reps in result.members.items() for r in reps if r.task_id.startswith("n"))
    assert holders == ["a", "b", "c"]


def test_tasks_without_a_namespace_are_not_spread() -> None:
    result = PulsarUniformAssignor().assign(spreading_context([TaskSpec("z1")]))
    assert owned_ids(result.members)["b"] == ["x3", "z1"]


def test_pulsar_avg_turns_spreading_off_as_upstream_does_with_avg_shedder() -> None:
    assert PulsarAvgAssignor().config.load_balancer_distribute_bundles_evenly_enabled is False
    assert LoadBalancerConfig().load_balancer_distribute_bundles_evenly_enabled is True
    assert MB == 1024 * 1024
