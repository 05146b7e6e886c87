"""A server-side assignor's task split in the consumer protocol (issue 34), on the model and a fake clock.

A ``pulsar-*`` full pass splits a task over the split limits (Pulsar's auto bundle split): the target
names the children, which the catalog does not hold yet. As the classic protocol does with a leader's
SyncGroup, the coordinator applies the split to the catalog with the target (one write), fenced by the
catalog version the computation read; the group never stays without a target.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from groupcoord.assignors.base import Assignment, TaskReplica, TaskSpec, TaskSplit
from groupcoord.assignors.pulsar.testing import steady_task
from groupcoord.assignors.registry import get_assignor, register
from groupcoord.assignors.snapshot import LoadSnapshot, WorkerLoadStats
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.consumer_target import SplitTarget, check_target
from groupcoord.coordinator.model.effects import Offload, Persist, Reply, TimerKey
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import snapshot_to_pb
from groupcoord.worker.consumer_leader import target_answer
from tests.coordinator.model.consumer_sim import Fleet, heartbeat
from tests.coordinator.model.test_consumer_load import reconciled, run

G = "g"
ASSIGN = TimerKey("c-assign", G)
HALVES = {"orders/0x00000000_0x80000000", "orders/0x80000000_0x100000000"}


@pytest.fixture(autouse=True)
def fresh_assignor() -> Iterator[None]:
    """A pulsar-* assignor keeps state per group id between runs: each test starts with its own."""
    shared = get_assignor("pulsar-avg")
    register(type(shared)(), replace=True)
    yield
    register(shared, replace=True)


def join(model: CoordinatorModel, name: str, assignor: str = "pulsar-avg") -> str:
    effects = run(model, model.group_heartbeat(
        pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, client_id=name, assignor=assignor), 1))
    [reply] = [e for e in effects if isinstance(e, Reply)]
    response: Any = reply.response
    assert response.error.code == pb.NONE, response.error
    return str(response.member_id)


ORDERS = pb.Task(task_id="orders", attributes={"hash_lower": "0x00000000", "hash_upper": "0x100000000"})
CATALOG = pb.PutTasksRequest(group_id=G, tasks=[ORDERS, pb.Task(task_id="other")])


def formed(clock: FakeClock, config: CoordinatorConfig | None = None) -> tuple[CoordinatorModel, list[str]]:
    """Two members running ``orders`` (splittable: a hash range) and ``other``, reconciled."""
    model = CoordinatorModel(config, clock=clock)
    model.put_tasks(CATALOG, 1)
    members = [join(model, "a"), join(model, "b")]
    run(model, model.fire(ASSIGN))
    reconciled(model)
    return model, members


def hot_snapshot(model: CoordinatorModel, created_ms: int) -> pb.LoadSnapshot:
    """``orders`` at 40,000 msg/s over 10 topics: over Pulsar's 30,000 msg/s split limit."""
    group = model.consumer.groups[G]
    owner = {t.task_id: mid for mid, tasks in group.target.items() for t in tasks}
    assert set(owner) == {"orders", "other"}
    hot = replace(steady_task("orders", owner["orders"], 20_000.0, long_samples=50), topics=10)
    tasks = {"orders": hot, "other": steady_task("other", owner["other"], 10.0, long_samples=50)}
    workers = {m: WorkerLoadStats(m, cpu_usage=30.0, cpu_limit=100.0) for m in group.members}
    return snapshot_to_pb(LoadSnapshot(G, snapshot_id=f"s{created_ms}", created_ms=created_ms, tasks=tasks,
                                       workers=workers))


def publish(model: CoordinatorModel, snapshot: pb.LoadSnapshot) -> None:
    effects = model.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snapshot), 7)
    [reply] = [e for e in effects if isinstance(e, Reply)]
    assert reply.response.error.code == pb.NONE  # type: ignore[attr-defined]


def placed(model: CoordinatorModel) -> set[str]:
    return {t.task_id for tasks in model.consumer.groups[G].target.values() for t in tasks}


def test_a_split_in_a_full_pass_is_applied_to_the_catalog_and_a_newcomer_gets_tasks() -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    publish(model, hot_snapshot(model, clock.wall_ms()))
    version = model.groups[G].catalog_version
    newcomer = join(model, "c")
    effects = run(model, model.fire(ASSIGN))
    group = model.consumer.groups[G]
    assert group.target_epoch == group.epoch, group.last_error  # not stuck on the previous target
    assert group.last_error == ""
    assert set(model.groups[G].tasks) == HALVES | {"other"}  # the parent replaced by its children
    assert model.groups[G].catalog_version == version + 1
    assert placed(model) == HALVES | {"other"}
    assert group.target_of(newcomer)  # the member that joined is placed
    [write] = [e for e in effects if isinstance(e, Persist)]  # the catalog and the target in one write
    assert write.record is not None and set(write.record["tasks"].tasks) == HALVES | {"other"} and write.parts
    reconciled(model)
    model.validate()


def test_the_split_is_not_made_again_and_later_changes_are_placed() -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    publish(model, hot_snapshot(model, clock.wall_ms()))
    join(model, "c")
    run(model, model.fire(ASSIGN))
    reconciled(model)
    version = model.groups[G].catalog_version
    late = join(model, "d")  # the snapshot still calls "orders" hot: it is gone, its children are not named
    run(model, model.fire(ASSIGN))
    group = model.consumer.groups[G]
    assert group.target_epoch == group.epoch and group.last_error == ""
    assert model.groups[G].catalog_version == version and placed(model) == HALVES | {"other"}
    assert late in group.target  # placed by the new target (four members, three tasks: maybe with none)


def test_a_catalog_edit_while_the_target_is_computed_undoes_the_split_and_the_next_pass_applies_it(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    publish(model, hot_snapshot(model, clock.wall_ms()))
    newcomer = join(model, "c")
    [job] = [e for e in model.fire(ASSIGN) if isinstance(e, Offload)]  # computing off the loop...
    model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="extra")]), 3)  # ...the catalog moves
    run(model, job.then(job.job()))
    group = model.consumer.groups[G]
    assert "split of orders not applied: the catalog changed while the target was computed" in group.last_error
    assert "orders" in model.groups[G].tasks and not HALVES & set(model.groups[G].tasks)
    assert placed(model) == {"orders", "other"}  # the computed target, the parent kept where its first child went
    assert newcomer in group.target  # the member that joined is in the target of its epoch
    assert "split_refused" in [getattr(r, "event", "") for r in caplog.records]
    run(model, model.fire(ASSIGN))  # the edit moved the epoch: the next pass splits against the catalog as it is
    assert group.target_epoch == group.epoch and group.last_error == ""
    assert set(model.groups[G].tasks) == HALVES | {"other", "extra"} and placed(model) == HALVES | {"other", "extra"}
    reconciled(model)
    model.validate()


def test_a_split_over_the_catalog_limit_is_undone_and_the_newcomer_still_placed() -> None:
    clock = FakeClock()
    model, _ = formed(clock, CoordinatorConfig(group_max_tasks=2))
    publish(model, hot_snapshot(model, clock.wall_ms()))
    newcomer = join(model, "c")
    run(model, model.fire(ASSIGN))
    group = model.consumer.groups[G]
    assert group.target_epoch == group.epoch  # a target all the same
    assert group.last_error == ("split of orders not applied: the splits would make 3 tasks; at most 2 "
                                "(group_max_tasks)")
    assert set(model.groups[G].tasks) == {"orders", "other"} and placed(model) == {"orders", "other"}
    assert newcomer in group.target
    [reply] = [e for e in model.describe_group(pb.DescribeGroupRequest(group_id=G), 5) if isinstance(e, Reply)]
    assert reply.response.last_error == group.last_error  # type: ignore[attr-defined]  # what `groups describe` shows
    reconciled(model)
    model.validate()


def test_check_target_refuses_a_malformed_split_and_undoes_a_good_one() -> None:
    catalog = CatalogSnapshot(7, {"p": pb.Task(task_id="p", replicas=2), "q": pb.Task(task_id="q")})
    children = (TaskSpec("p/1", replicas=2), TaskSpec("p/2", replicas=2))
    members = {"a": [TaskReplica("p/1", 0), TaskReplica("p/2", 1)], "b": [TaskReplica("p/2", 0), TaskReplica("q")],
               "c": [TaskReplica("p/1", 1)]}
    result = check_target(Assignment(members=members, splits=[TaskSplit("p", children)]), {"a", "b", "c"}, catalog)
    assert isinstance(result, SplitTarget) and result.base == 7 and set(result.tasks) == {"p/1", "p/2", "q"}
    assert result.target["b"] == {TaskReplica("p/2", 0), TaskReplica("q")}
    assert result.kept == {"a": {TaskReplica("p", 0)}, "b": {TaskReplica("q")}, "c": {TaskReplica("p", 1)}}
    unknown = Assignment(members={"a": [TaskReplica("x/1")]}, splits=[TaskSplit("x", (TaskSpec("x/1"),))])
    assert check_target(unknown, {"a"}, catalog) == "the assignor's split: split of unknown task 'x'"
    clash = Assignment(members={"a": [TaskReplica("q")]}, splits=[TaskSplit("p", (TaskSpec("q"),))])
    assert "child id 'q' is empty or already in use" in str(check_target(clash, {"a"}, catalog))
    empty = Assignment(members={}, splits=[TaskSplit("p", ())])
    assert check_target(empty, set(), catalog) == "the assignor's split: split of 'p' has no children"


def test_the_split_is_written_with_the_target_and_a_restart_resumes_both(tmp_path: Any) -> None:
    """Through the runtime and a SQLite store: members running what they are told, no task run twice."""
    path = tmp_path / "groups.db"
    store = SqliteStore(path)
    h = Harness(CoordinatorConfig(), store=store)
    assert h.run(lambda token: h.model.put_tasks(CATALOG, token), pb.PutTasksResponse).code == pb.NONE
    fleet = Fleet(h, ["a", "b", "c"])
    fleet.join("a", assignor="pulsar-avg")
    fleet.join("b", assignor="pulsar-avg")
    fleet.settle()
    snapshot = hot_snapshot(h.model, h.clock.wall_ms())
    assert h.run(lambda token: h.model.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snapshot), token),
                 pb.PublishLoadSnapshotResponse).code == pb.NONE
    fleet.join("c", assignor="pulsar-avg")
    fleet.settle()
    running = fleet.running()
    assert {t.task_id for tasks in running.values() for t in tasks} == HALVES | {"other"}
    assert "c" in running  # the member that joined runs tasks
    fleet.assert_no_task_run_twice()
    group = h.model.consumer.groups[G]
    target = dict(group.target)
    store.close()
    again = Harness(CoordinatorConfig(), store=SqliteStore(path))
    assert again.runtime.load() == 1
    assert set(again.model.groups[G].tasks) == HALVES | {"other"}
    assert dict(again.model.consumer.groups[G].target) == target


def lead(fleet: Fleet) -> pb.TargetAnswer:
    """The member asked for a target answers it with the worker's own code (``target_answer``), with an
    assignor instance of its own, as in its own process (a pulsar-* assignor keeps state between runs)."""
    fleet.h.advance(0.2)
    asked = {name: fleet.beat(name) for name, m in fleet.members.items() if m.joined}
    [(name, response)] = [(n, r) for n, r in asked.items() if r.HasField("compute_target")]
    answer = target_answer(lambda name: type(get_assignor(name))(), G, response.compute_target)  # the worker's own
    assert answer is not None
    member = fleet.members[name]
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=member.member_id, member_epoch=member.epoch, target=answer)
    request.owned.SetInParent()
    request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in member.running)
    fleet._apply(member, heartbeat(fleet.h, request).response)
    return answer


def test_a_leader_sides_split_is_applied_without_the_fallback(caplog: pytest.LogCaptureFixture) -> None:
    """A ``client:pulsar-*`` leader's answer carries its split (``TargetAnswer.splits``): the coordinator
    applies it to the catalog with the target, and its own assignor never runs (no fallback)."""
    h = Harness(CoordinatorConfig())
    assert h.run(lambda token: h.model.put_tasks(CATALOG, token), pb.PutTasksResponse).code == pb.NONE
    fleet = Fleet(h, ["a", "b", "c"])
    fleet.join("a", assignor="client:pulsar-avg")
    fleet.join("b", assignor="client:pulsar-avg")
    lead(fleet)
    fleet.settle()
    snapshot = hot_snapshot(h.model, h.clock.wall_ms())
    assert h.run(lambda token: h.model.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snapshot), token),
                 pb.PublishLoadSnapshotResponse).code == pb.NONE
    version = h.model.groups[G].catalog_version
    fleet.join("c", assignor="client:pulsar-avg")
    answer = lead(fleet)
    assert [s.parent_task_id for s in answer.splits] == ["orders"]  # the worker sent its assignor's split
    assert set(h.model.groups[G].tasks) == HALVES | {"other"} and h.model.groups[G].catalog_version == version + 1
    fleet.settle()
    group = h.model.consumer.groups[G]
    assert group.target_epoch == group.epoch and group.last_error == "" and not group.failed_leader
    assert [r for r in caplog.records if getattr(r, "event", "") == "leader_target_failed"] == []  # no fallback
    assert {t.task_id for tasks in fleet.running().values() for t in tasks} == HALVES | {"other"}  # where pulsar put them
    fleet.assert_no_task_run_twice()
