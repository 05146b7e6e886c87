"""The coordinator computes a consumer group's target incrementally when it can: a member in or out
and catalog keys added or deleted go through ``assign_incremental``; a task edited in place, a target
it no longer has a basis for (a restart) or an assignor without the method take the full pass. The
incremental result is checked for what moved (``check_moves``): a bad answer is refused, not installed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.incremental import TargetChange
from groupcoord.assignors.round_robin import RoundRobinAssignor
from groupcoord.assignors.sticky import StickyAssignor
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.model.consumer_target import check_moves
from groupcoord.coordinator.model.effects import TimerKey
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.test_consumer_request_cost import run

G = "g"


def join(model: CoordinatorModel, name: str, assignor: str = "sticky") -> str:
    [reply] = run(model, model.group_heartbeat(pb.GroupHeartbeatRequest(
        group_id=G, member_epoch=0, client_id=name, assignor=assignor), 1))
    response: Any = reply.response
    assert response.error.code == pb.NONE, response.error
    return str(response.member_id)


def settle(model: CoordinatorModel) -> None:
    run(model, model.fire(TimerKey("c-assign", G)))
    group = model.consumer.groups[G]
    assert group.target_epoch == group.epoch and not group.last_error, group.last_error


class Calls:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = self.incremental = 0
        full, incremental = StickyAssignor.assign, StickyAssignor.assign_incremental

        def counted_full(assignor: StickyAssignor, context: Any) -> Any:
            self.full += 1
            return full(assignor, context)

        def counted_incremental(assignor: StickyAssignor, change: TargetChange) -> Any:
            self.incremental += 1
            return incremental(assignor, change)

        monkeypatch.setattr(StickyAssignor, "assign", counted_full)
        monkeypatch.setattr(StickyAssignor, "assign_incremental", counted_incremental)

    def since(self) -> tuple[int, int]:
        seen = (self.full, self.incremental)
        self.full = self.incremental = 0
        return seen


def tasks(*ids: str, weight: float = 0.0) -> pb.PutTasksRequest:
    return pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=t, weight=weight) for t in ids])


def test_joins_leaves_and_catalog_keys_go_incremental_and_the_rest_full(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    model = CoordinatorModel(clock=FakeClock())
    model.put_tasks(tasks(*(f"t{i}" for i in range(9))), 1)
    a = join(model, "a")
    settle(model)
    assert calls.since() == (1, 0)  # a new group: no previous target
    b, c = join(model, "b"), join(model, "c")
    settle(model)
    group = model.consumer.groups[G]
    assert calls.since()[0] == 0 and sorted(len(t) for t in group.target.values()) == [3, 3, 3]
    run(model, model.group_heartbeat(pb.GroupHeartbeatRequest(group_id=G, member_id=b, member_epoch=-1), 1))
    settle(model)
    assert calls.since()[0] == 0 and sorted(len(t) for t in group.target.values()) == [4, 5]
    assert set().union(*group.target.values()) == {TaskReplica(f"t{i}") for i in range(9)}
    run(model, model.put_tasks(tasks("t9", "t10"), 1))
    run(model, model.delete_tasks(pb.DeleteTasksRequest(group_id=G, task_ids=["t0"]), 1))
    settle(model)
    assert calls.since()[0] == 0 and len(set().union(*group.target.values())) == 10
    assert TaskReplica("t0") not in set().union(*group.target.values())
    run(model, model.put_tasks(tasks("t1", weight=3.0), 1))  # edited in place: placed afresh
    settle(model)
    assert calls.since() == (1, 0)
    model.validate()
    assert {a, c} == set(group.target)


def test_an_assignor_without_the_method_runs_its_full_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = []
    full = RoundRobinAssignor.assign
    monkeypatch.setattr(RoundRobinAssignor, "assign", lambda self, ctx: counted.append(1) or full(self, ctx))
    model = CoordinatorModel(clock=FakeClock())
    model.put_tasks(tasks("t1", "t2"), 1)
    join(model, "a", "round-robin")
    settle(model)
    join(model, "b", "round-robin")
    settle(model)
    assert len(counted) == 2


def test_a_broken_incremental_answer_is_dropped_for_the_full_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    model = CoordinatorModel(clock=FakeClock())
    model.put_tasks(tasks("t1", "t2", "t3"), 1)
    a = join(model, "a")
    settle(model)
    monkeypatch.setattr(StickyAssignor, "assign_incremental",  # gives b what a keeps
                        lambda self, change: {**change.previous, **{m.member_id: change.previous[a]
                                                                    for m in change.members if m.member_id != a}})
    join(model, "b")
    settle(model)
    group = model.consumer.groups[G]
    assert calls.since() == (2, 0) and sorted(len(t) for t in group.target.values()) == [1, 2]
    assert set().union(*group.target.values()) == {TaskReplica(t) for t in ("t1", "t2", "t3")}


def test_a_bad_incremental_answer_is_refused() -> None:
    from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot

    t1, t2, t3 = TaskReplica("t1"), TaskReplica("t2"), TaskReplica("t3")
    catalog = CatalogSnapshot(1, {t: pb.Task(task_id=t) for t in ("t1", "t2")})
    a_had = frozenset({t1, t2})
    change = TargetChange(previous={"a": a_had}, members=(), homeless=frozenset(), removed=frozenset(), total=2,
                          plain=True)
    assert isinstance(check_moves(change, {"a": frozenset({t1}), "b": frozenset({t2})}, {"a", "b"}, catalog), dict)
    assert "twice" in str(check_moves(change, {"a": a_had, "b": frozenset({t2})}, {"a", "b"}, catalog))
    stray = TargetChange(previous={"a": a_had}, members=(), homeless=frozenset({t3}), removed=frozenset(), total=2,
                         plain=True)  # free, but not in the catalog
    assert "catalog" in str(check_moves(stray, {"a": a_had, "b": frozenset({t3})}, {"a", "b"}, catalog))
    assert "members" in str(check_moves(change, {"a": a_had}, {"a", "b"}, catalog))


LOAD_AWARE = ("balanced", "pulsar-threshold", "pulsar-uniform", "pulsar-avg", "pulsar-overload", "pulsar-transfer")


@pytest.mark.parametrize("name", LOAD_AWARE)
def test_the_load_aware_assignors_go_incremental_and_move_only_what_must_move(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from groupcoord.assignors.registry import get_assignor

    assignor = get_assignor(name)
    monkeypatch.setattr(assignor._groups, "_states", OrderedDict())  # the registry's instance: no other test's history for "g"
    calls = {"full": 0, "incremental": 0}
    full, incremental = assignor.assign, assignor.assign_incremental  # type: ignore[attr-defined]

    def counted(kind: str, run: Any) -> Any:
        def call(arg: Any) -> Any:
            calls[kind] += 1
            return run(arg)
        return call

    monkeypatch.setattr(assignor, "assign", counted("full", full))
    monkeypatch.setattr(assignor, "assign_incremental", counted("incremental", incremental))
    model = CoordinatorModel(clock=FakeClock())
    model.put_tasks(tasks(*(f"t{i}" for i in range(9))), 1)
    a = join(model, "a", name)
    settle(model)
    b = join(model, "b", name)
    settle(model)
    group = model.consumer.groups[G]
    assert calls == {"full": 1, "incremental": 1}  # the first target is a full pass: no basis before it
    before = dict(group.target)
    c = join(model, "c", name)
    settle(model)
    after = dict(group.target)
    moved = {r for m in (a, b) for r in before[m] - after[m]}
    if name == "balanced":  # its goal: the busiest within 3% of the mean; 5/4/0 -> 3/3/3 is the least move
        assert sorted(len(after[m]) for m in (a, b, c)) == [3, 3, 3] and len(moved) == 3
        assert not any(before[m] - after[m] and after[m] - before[m] for m in (a, b))  # none gives and takes
    else:  # Pulsar: a new broker gets nothing until the shedder (which needs a load snapshot) moves bundles
        assert not moved and after == {**before, c: frozenset()}
    run(model, model.group_heartbeat(pb.GroupHeartbeatRequest(group_id=G, member_id=b, member_epoch=-1), 1))
    settle(model)
    left = dict(group.target)
    assert all(after[m] <= left[m] for m in (a, c)), "a member that stayed lost a task"
    assert set().union(*left.values()) == {TaskReplica(f"t{i}") for i in range(9)}
    assert calls == {"full": 1, "incremental": 3}
    model.validate()


def passes_of(name: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the registered assignor ``name`` runs from now on, in order ("full", "incremental", "declined"),
    with its per-group state emptied first."""
    from groupcoord.assignors.registry import get_assignor

    assignor = get_assignor(name)
    monkeypatch.setattr(assignor._groups, "_states", OrderedDict())  # type: ignore[attr-defined]
    answers: list[str] = []
    full, incremental = assignor.assign, assignor.assign_incremental  # type: ignore[attr-defined]
    monkeypatch.setattr(assignor, "assign", lambda context: answers.append("full") or full(context))
    monkeypatch.setattr(assignor, "assign_incremental", lambda change: answers.append(
        "declined" if (answer := incremental(change)) is None else "incremental") or answer)
    return answers


def test_balanced_goes_on_incrementally_under_the_snapshot_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new snapshot is a full pass (the estimate reads it all); the joins after it, under the same
    snapshot, go incremental; a catalog edit under it is a full pass again."""
    answers = passes_of("balanced", monkeypatch)
    clock = FakeClock()
    model = CoordinatorModel(clock=clock)
    model.put_tasks(tasks(*(f"t{i}" for i in range(12))), 1)
    a = join(model, "a", "balanced")
    settle(model)
    b = join(model, "b", "balanced")
    settle(model)
    rates = {f"t{i}": 10.0 * (i + 1) for i in range(12)}
    group = model.consumer.groups[G]
    owner = {r.task_id: m for m, owned in group.target.items() for r in owned}
    snapshot = pb.LoadSnapshot(
        group_id=G, snapshot_id="s-1", created_ms=clock.wall_ms(),
        tasks=[pb.TaskLoadStats(task_id=t, worker_id=owner[t], short_samples=10, long_samples=100,
                                short_msg_rate_in=rate) for t, rate in rates.items()],
        workers=[pb.WorkerLoadStats(worker_id=m, cpu_usage=40.0, cpu_limit=100.0) for m in (a, b)])
    [reply] = run(model, model.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snapshot), 1))
    assert reply.response.error.code == pb.NONE  # type: ignore[attr-defined]
    answers.clear()
    join(model, "c", "balanced")
    settle(model)
    assert answers == ["declined", "full"]  # a snapshot not read yet
    join(model, "d", "balanced")
    settle(model)
    assert answers[2:] == ["incremental"]
    covered = [r for owned in group.target.values() for r in owned]
    assert sorted(covered) == sorted(TaskReplica(t) for t in rates)  # each task once
    run(model, model.put_tasks(tasks("t12"), 1))
    settle(model)
    assert answers[3:] == ["declined", "full"]  # a task the estimate has not seen: its median, a full pass
    model.validate()
