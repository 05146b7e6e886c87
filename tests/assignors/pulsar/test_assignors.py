"""The four pulsar-* assignors on assignment contexts with load snapshots."""

from __future__ import annotations

import logging
import random
from collections import Counter
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.assignors import get_assignor
from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec, eligible_members
from groupcoord.assignors.pulsar import (
    LoadBalancerConfig,
    PulsarAvgAssignor,
    PulsarOverloadAssignor,
    PulsarThresholdAssignor,
    PulsarUniformAssignor,
)
from groupcoord.assignors.pulsar.assignors import PulsarAssignor
from groupcoord.assignors.pulsar.testing import FakeClock, steady_task
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats

ASSIGNORS = [PulsarThresholdAssignor, PulsarUniformAssignor, PulsarAvgAssignor, PulsarOverloadAssignor]
MSG = 4096.0


def snapshot(sid: str, cpu: dict[str, float], rates: dict[str, float], owner: dict[str, str]) -> LoadSnapshot:
    tasks = {
        t: steady_task(t, owner.get(t, ""), r, msg_bytes=MSG, long_samples=50)
        for t, r in rates.items()
    }
    workers = {m: WorkerLoadStats(m, cpu_usage=c, cpu_limit=100.0) for m, c in cpu.items()}
    return LoadSnapshot("g", snapshot_id=sid, created_ms=int(sid.strip("s") or 0), tasks=tasks, workers=workers)


def context(
    owner: dict[str, str],
    members: list[str],
    tasks: list[TaskSpec] | None = None,
    snap: LoadSnapshot | None = None,
    generation: int = 1,
    pools: dict[str, str] | None = None,
) -> AssignmentContext:
    owned: dict[str, list[TaskReplica]] = {m: [] for m in members}
    for t, m in owner.items():
        if m in owned:
            owned[m].append(TaskReplica(t))
    pools = pools or {}
    return AssignmentContext(
        group_id="g",
        generation=generation,
        members=tuple(
            MemberInfo(m, pool=pools.get(m, ""), owned=tuple(owned[m]), owned_generation=generation - 1)
            for m in members
        ),
        tasks=tuple(tasks if tasks is not None else [TaskSpec(t) for t in sorted(owner)]),
        load_snapshot=snap,
        rng=random.Random(generation),
    )


def check_valid(ctx: AssignmentContext, result: Assignment) -> None:
    """The coordinator's rules: each replica once, replicas on distinct members, pools kept."""
    assert set(result.members) == {m.member_id for m in ctx.members}
    seen = Counter(r for reps in result.members.values() for r in reps)
    assert all(n == 1 for n in seen.values())
    members = {m.member_id: m for m in ctx.members}
    catalog = {t.task_id: t for t in ctx.tasks}
    for split in result.splits:
        del catalog[split.parent_task_id]
        catalog.update({c.task_id: c for c in split.children})
    for task in catalog.values():
        holders = [m for m, reps in result.members.items() for r in reps if r.task_id == task.task_id]
        assert len(holders) == len(set(holders))
        for replica in task.replica_ids():
            assert (replica in seen) != (replica in result.unassigned)
        for h in holders:
            assert members[h] in eligible_members(task, ctx.members)
    assert all(r.task_id in catalog for r in seen)


def imbalanced() -> tuple[dict[str, str], dict[str, float], dict[str, float]]:
    """a runs 16 busy tasks at 95% cpu; b and c run 2 each at 10%."""
    owner = {f"t{i:02d}": "a" for i in range(16)} | {"u0": "b", "u1": "b", "v0": "c", "v1": "c"}
    rates = {t: 5000.0 for t in owner}
    return owner, {"a": 95.0, "b": 10.0, "c": 10.0}, rates


def test_registry_names_and_recheck_interval() -> None:
    for cls in ASSIGNORS:
        found = get_assignor(cls.name)
        assert type(found) is cls
        assert found.recheck_interval_s == 60.0
    assert PulsarAvgAssignor().config.max_unload_percentage == 0.5  # PIP-364's setting
    assert (
        PulsarThresholdAssignor(LoadBalancerConfig(load_balancer_shedding_interval_minutes=5)).recheck_interval_s == 300
    )


@pytest.mark.parametrize("cls", ASSIGNORS)
def test_without_snapshot_sticky_round_robin_and_says_so(cls: type, caplog: pytest.LogCaptureFixture) -> None:
    ctx = context({"t1": "b", "t2": "gone"}, ["a", "b"], tasks=[TaskSpec(t) for t in ("t1", "t2", "t3", "t4")])
    with caplog.at_level(logging.INFO, logger="groupcoord.assignors.pulsar.assignors"):
        result = cls().assign(ctx)
    assert "sticky round-robin" in caplog.text
    check_valid(ctx, result)
    assert TaskReplica("t1") in result.members["b"]  # sticky
    assert sorted(len(v) for v in result.members.values()) == [2, 2]
    assert cls().needs_rebalance(ctx) is False


@pytest.mark.parametrize("cls", ASSIGNORS)
def test_sheds_from_the_overloaded_member_and_respects_grace_period(cls: type) -> None:
    owner, cpu, rates = imbalanced()
    clock = FakeClock(1000.0)
    assignor = cls(clock=clock)
    members = ["a", "b", "c"]
    moved_total: set[str] = set()
    for round_no in range(1, 4):  # AvgShedder needs two high hits
        ctx = context(owner, members, snap=snapshot(f"s{round_no}", cpu, rates, owner), generation=round_no)
        if assignor.needs_rebalance(ctx):
            result = assignor.assign(ctx)
            check_valid(ctx, result)
            new_owner = {r.task_id: m for m, reps in result.members.items() for r in reps}
            moved = {t for t in owner if new_owner[t] != owner[t]}
            assert all(owner[t] == "a" for t in moved)  # only off the overloaded member
            assert not (moved & moved_total)  # never a task inside its grace period
            moved_total |= moved
            owner = new_owner
            assert assignor.needs_rebalance(ctx) is False  # this snapshot's decision is used up
        clock.advance(60)
    assert moved_total, f"{cls.name} moved nothing off a 95% member"


def test_avg_assignor_places_shed_tasks_on_the_paired_member() -> None:
    owner = {f"t{i}": "a" for i in range(8)} | {"u": "b", "v": "c"}
    rates = {t: 1000.0 for t in owner}
    cpu = {"a": 90.0, "b": 10.0, "c": 45.0}  # pairs: (b, a); c alone
    assignor = PulsarAvgAssignor(clock=FakeClock())
    assignor.needs_rebalance(context(owner, ["a", "b", "c"], snap=snapshot("s1", cpu, rates, owner)))
    ctx = context(owner, ["a", "b", "c"], snap=snapshot("s2", cpu, rates, owner), generation=2)
    result = assignor.assign(ctx)
    check_valid(ctx, result)
    assert {m for _, src, m in assignor.last_round.moves} == {"b"}
    # (8000 - 1000) x 2 (in + out) x 0.5 = 7000 msg/s: three 2000 msg/s tasks
    assert len(assignor.last_round.moves) == 3


def test_uniform_assignor_spreads_new_tasks_with_preallocation() -> None:
    owner = {"x": "a", "y": "b"}
    rates = {"x": 1000.0, "y": 1000.0} | {f"n{i}": 500.0 for i in range(6)}
    tasks = [TaskSpec(t) for t in sorted(rates)]
    ctx = context(owner, ["a", "b", "c"], tasks=tasks, snap=snapshot("s1", {"a": 30, "b": 30}, rates, owner))
    result = PulsarUniformAssignor().assign(ctx)
    check_valid(ctx, result)
    load = {m: sum(2 * rates[r.task_id] for r in reps) for m, reps in result.members.items()}
    # c (idle) takes the first two (2 x 1000 msg/s), then all tie at 2000 and the rest spread:
    # without preallocation all six would have gone to c.
    assert max(load.values()) - min(load.values()) <= 1000
    assert len(result.members["c"]) >= 2


def test_pools_and_replicas_are_kept() -> None:
    pools = {"a": "", "b": "", "c": "", "p1": "gpu", "p2": "gpu"}
    tasks = [TaskSpec(f"t{i}", replicas=2) for i in range(6)] + [TaskSpec(f"g{i}", pool="gpu") for i in range(3)]
    tasks.append(TaskSpec("too-many", replicas=3, pool="gpu"))
    owner = {"t0": "a", "t1": "a", "g0": "a"}  # g0 on a member outside its pool must move
    rates = {t.task_id: 100.0 for t in tasks}
    for cls in ASSIGNORS:
        ctx = context(owner, list(pools), tasks=tasks, snap=snapshot("s1", {"a": 80}, rates, owner), pools=pools)
        result = cls().assign(ctx)
        check_valid(ctx, result)
        assert TaskReplica("too-many", 2) in result.unassigned
        assert TaskReplica("t0", 0) in result.members["a"]


def test_split_replaces_parent_by_children_in_the_assignment() -> None:
    attrs = MappingProxyType({"hash_lower": "0x00000000", "hash_upper": "0x100000000"})
    tasks = [TaskSpec("orders", attributes=attrs), TaskSpec("other")]
    owner = {"orders": "a", "other": "b"}
    snap = snapshot("s1", {"a": 50, "b": 20}, {"orders": 20000.0, "other": 10.0}, owner)  # 40000 msg/s > 30000
    snap.tasks["orders"] = TaskLoadStats(
        **{**{f: getattr(snap.tasks["orders"], f) for f in TaskLoadStats.__slots__}, "topics": 10}
    )
    for cls in ASSIGNORS:
        assignor = cls()
        ctx = context(owner, ["a", "b"], tasks=tasks, snap=snap)
        assert assignor.needs_rebalance(ctx) is True
        result = assignor.assign(ctx)
        check_valid(ctx, result)
        assert [s.parent_task_id for s in result.splits] == ["orders"]
        names = {r.task_id for reps in result.members.values() for r in reps}
        assert names == {"other", "orders/0x00000000_0x80000000", "orders/0x80000000_0x100000000"}


@st.composite
def random_contexts(draw: st.DrawFn) -> AssignmentContext:
    n = draw(st.integers(1, 6))
    members = [f"m{i}" for i in range(n)]
    pools = {m: draw(st.sampled_from(["", "", "x"])) for m in members}
    tasks = [
        TaskSpec(f"t{i}", replicas=draw(st.integers(1, 3)), pool=draw(st.sampled_from(["", "", "x"])))
        for i in range(draw(st.integers(0, 15)))
    ]
    owner = {t.task_id: draw(st.sampled_from(members + ["gone"])) for t in tasks if draw(st.booleans())}
    cpu = {m: draw(st.floats(0, 100)) for m in members if draw(st.booleans())}
    rates = {t.task_id: draw(st.floats(0, 50000)) for t in tasks if draw(st.booleans())}
    return context(owner, members, tasks=tasks, snap=snapshot("s7", cpu, rates, owner), pools=pools)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_contexts(), st.sampled_from(ASSIGNORS))
def test_any_context_gives_a_valid_assignment(ctx: AssignmentContext, cls: type) -> None:
    assignor: PulsarAssignor = cls(clock=FakeClock())
    assignor.needs_rebalance(ctx)
    check_valid(ctx, assignor.assign(ctx))
