"""The server-side assignor a consumer group runs: the one most of its members name (Kafka's
ConsumerGroup.computePreferredServerAssignor), recomputed as members join, rename and leave; ties keep
the group's, else the smallest name; a change moves the group epoch and the next target is a full pass
of the new assignor; kept across a restart (each member's record keeps the name it gave)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from groupcoord.assignors import registry
from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica
from groupcoord.assignors.registry import register
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.consumer_assignor import preferred, unsupported
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G, heartbeat

ALL = {TaskReplica(f"t{i}") for i in range(6)}


class FirstTakesAll:
    """Every task to the smallest member id: a target no other assignor would compute."""

    name = "test-first-takes-all"

    def assign(self, context: AssignmentContext) -> Assignment:
        ids = sorted(m.member_id for m in context.members)
        plan: dict[str, list[TaskReplica]] = {i: [] for i in ids}
        if ids:
            plan[ids[0]] = [r for task in context.tasks for r in task.replica_ids()]
        return Assignment(plan)


def fleet(names: str, store: SqliteStore | None = None) -> Fleet:
    register(FirstTakesAll(), replace=True)
    h = Harness(CoordinatorConfig(), store=store)
    assert h.put_tasks(G, *(f"t{i}" for i in range(6))) == pb.NONE
    return Fleet(h, list(names))


def rename(f: Fleet, name: str, assignor: str) -> pb.GroupHeartbeatResponse:
    m = f.members[name]
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=m.member_id, member_epoch=m.epoch, assignor=assignor)
    return heartbeat(f.h, request).response


@pytest.mark.parametrize(("counts", "current", "expected"), [
    ({}, "sticky", "sticky"),  # nobody names one: the default (here the group's own)
    ({}, "range", "sticky"),
    ({"range": 2, "uniform": 1}, "uniform", "range"),
    ({"range": 1, "uniform": 1}, "uniform", "uniform"),  # a tie keeps the group's
    ({"range": 1, "uniform": 1}, "sticky", "range"),  # ... else the smallest name
    ({"client:sticky": 2, "sticky": 1}, "sticky", "client:sticky"),  # a leader-side name counts as any
])
def test_the_preferred_assignor_is_the_most_named(counts: dict[str, int], current: str, expected: str) -> None:
    assert preferred(counts, current, "sticky") == expected


def test_kafkas_sequence_members_naming_none_do_not_count() -> None:
    """ConsumerGroupTest.testPreferredServerAssignor's steps: range, range, uniform; then members one
    by one name none; uniform wins once only it is named, and the group falls back to the default."""
    f = fleet("abc")
    f.join("a", assignor="round-robin")
    group = f.h.model.consumer.groups[G]
    assert group.assignor == "round-robin"
    f.join("b", assignor="round-robin")
    f.join("c", assignor="test-first-takes-all")
    assert group.assignor == "round-robin" and group.named == {"round-robin": 2, "test-first-takes-all": 1}
    assert rename(f, "a", "").error.code == pb.NONE  # a names none now: 1 against 1, the group keeps its own
    assert group.assignor == "round-robin"
    assert rename(f, "b", "").error.code == pb.NONE
    assert group.assignor == "test-first-takes-all" and group.named == {"test-first-takes-all": 1}
    assert rename(f, "c", "").error.code == pb.NONE
    assert group.assignor == "sticky" and group.named == {}  # nobody names one: the coordinator's default
    group.validate()


def test_a_change_of_assignor_moves_the_epoch_and_a_leave_flips_it_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord.consumer")
    f = fleet("abcde")
    for name in "ab":
        f.join(name, assignor="round-robin")
    f.settle()
    group = f.h.model.consumer.groups[G]
    assert group.assignor == "round-robin" and all(len(t) == 3 for t in f.running().values())
    f.join("c", assignor="test-first-takes-all")
    f.join("d", assignor="test-first-takes-all")
    assert group.assignor == "round-robin"  # 2 against 2: the group keeps the one it runs
    epoch = group.epoch
    f.join("e", assignor="test-first-takes-all")  # 3 against 2: the group switches
    assert group.assignor == "test-first-takes-all" and group.epoch == epoch + 1
    [changed] = [r for r in caplog.records if getattr(r, "event", "") == "assignor_changed"]
    assert (changed.assignor, changed.previous) == ("test-first-takes-all", "round-robin")  # type: ignore[attr-defined]
    assert group.target_catalog is None  # no incremental basis: the new assignor's first target is a full pass
    f.settle()
    first = min(f.members.values(), key=lambda m: m.member_id).name
    assert f.running() == {first: ALL}, "the whole target comes from the new assignor"
    f.leave("e")
    f.settle()
    assert group.assignor == "test-first-takes-all"  # 2 against 2 again: kept
    f.leave("d")  # 2 against 1: back to round-robin
    assert group.assignor == "round-robin"
    f.settle()
    assert sorted(map(len, f.running().values())) == [2, 2, 2]
    f.assert_no_task_run_twice()
    group.validate()


def test_a_heartbeat_may_rename_and_an_unknown_name_is_refused_on_any_request() -> None:
    f = fleet("ab")
    f.join("a", assignor="round-robin")
    f.join("b")  # names none: counts for nobody
    f.settle()
    group = f.h.model.consumer.groups[G]
    epoch = group.epoch
    unknown = rename(f, "b", "no-such-assignor")
    assert unknown.error.code == pb.UNSUPPORTED_ASSIGNOR and "no-such-assignor" in unknown.error.message
    assert "round-robin" in unknown.error.message  # the names it knows
    assert group.assignor == "round-robin" and group.epoch == epoch and group.named == {"round-robin": 1}
    same = rename(f, "a", "round-robin")  # the name it gave: nothing changes, nothing written
    assert same.error.code == pb.NONE and group.epoch == epoch
    assert rename(f, "b", "test-first-takes-all").error.code == pb.NONE
    assert group.assignor == "round-robin" and group.epoch == epoch  # a tie: kept, no new epoch
    assert rename(f, "a", "test-first-takes-all").error.code == pb.NONE
    assert group.assignor == "test-first-takes-all" and group.epoch == epoch + 1
    refused = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, assignor="nope"))
    assert refused.code == pb.UNSUPPORTED_ASSIGNOR and len(group.members) == 2
    group.validate()


def test_a_leader_side_name_counts_and_switching_away_drops_the_leaders_request() -> None:
    f = fleet("abc")
    f.join("a", assignor="client:sticky")
    f.join("b", assignor="client:sticky")
    f.h.advance(0.2)  # the leader is asked (the simulated members never answer)
    group = f.h.model.consumer.groups[G]
    assert group.assignor == "client:sticky" and group.asked is not None
    f.join("c", assignor="round-robin")
    assert rename(f, "b", "round-robin").error.code == pb.NONE  # 2 against 1
    assert group.assignor == "round-robin" and group.asked is None
    f.settle()
    assert group.target_epoch == group.epoch and sorted(map(len, f.running().values())) == [2, 2, 2]
    group.validate()


def test_a_restart_keeps_the_groups_choice_and_each_members_name(tmp_path: Path) -> None:
    path = tmp_path / "groups.db"
    first = SqliteStore(path)
    f = fleet("abc", store=first)
    f.join("a", assignor="round-robin")
    f.join("b", assignor="test-first-takes-all")  # a tie: the group keeps round-robin
    f.join("c")
    f.settle()
    before = f.h.model.consumer.groups[G]
    assert before.assignor == "round-robin"
    first.close()  # the process stops
    f.h = again = Harness(CoordinatorConfig(), store=SqliteStore(path))
    assert again.runtime.load() == 1
    group = again.model.consumer.groups[G]
    assert group.assignor == "round-robin" and group.named == {"round-robin": 1, "test-first-takes-all": 1}
    assert {m.client_id: m.assignor for m in group.members.values()} == {
        "a": "round-robin", "b": "test-first-takes-all", "c": ""}
    f.leave("a")  # only test-first-takes-all is named now
    assert group.assignor == "test-first-takes-all"
    f.settle()
    assert list(f.running().values()) == [ALL]  # every task to one member: the new assignor's target
    group.validate()


def test_unknown_names_do_not_rescan_the_installed_packages_each_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request naming an assignor is checked on the loop; a name unknown here made the registry
    list every installed distribution's entry points (~30 ms of CPU) each time: now once per TTL."""
    scans: list[str] = []

    def counting(group: str) -> list[object]:
        scans.append(group)
        return []

    monkeypatch.setattr(registry, "entry_points", counting)
    monkeypatch.setattr(registry, "_scanned", None)
    for i in range(50):
        refused = unsupported(set(), f"nope-{i}")
        assert refused is not None and refused.code == pb.UNSUPPORTED_ASSIGNOR and f"nope-{i}" in refused.message
    assert len(scans) == 1
    assert unsupported(set(), "sticky") is None and unsupported(set(), "client:mine") is None
