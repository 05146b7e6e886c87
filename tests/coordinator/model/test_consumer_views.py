"""What the server-side assignor is handed of each member: a placement view kept per member until its
metadata changes (an incremental round takes it by reference, its ``owned`` empty), and for a full
pass that view with what the member owns at that moment. A member whose tasks changed is seen with
its new ones, a member gone is not seen (nor installed, when it left during the computation), a changed
rack is seen, and a restarted coordinator builds the views afresh from its records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from groupcoord.assignors.base import MemberInfo, TaskReplica
from groupcoord.assignors.incremental import TargetChange
from groupcoord.assignors.sticky import StickyAssignor
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import Effect, Offload, TimerKey
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G, heartbeat

Views = dict[str, MemberInfo]


class Handed:
    """The members each computation handed the sticky assignor, by member id; ``decline``: its
    incremental round answers None, so the coordinator runs the full pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full: list[Views] = []
        self.incremental: list[Views] = []
        self.decline = False
        full, incremental = StickyAssignor.assign, StickyAssignor.assign_incremental

        def on_full(assignor: StickyAssignor, context: Any) -> Any:
            self.full.append({m.member_id: m for m in context.members})
            return full(assignor, context)

        def on_incremental(assignor: StickyAssignor, change: TargetChange) -> Any:
            self.incremental.append({m.member_id: m for m in change.members})
            return None if self.decline else incremental(assignor, change)

        monkeypatch.setattr(StickyAssignor, "assign", on_full)
        monkeypatch.setattr(StickyAssignor, "assign_incremental", on_incremental)


def owned_now(f: Fleet) -> dict[str, tuple[tuple[TaskReplica, ...], int]]:
    """member id -> (what it runs, sorted; its epoch): what a full pass must read of it."""
    return {m.member_id: (tuple(sorted(m.running)), m.epoch) for m in f.members.values() if m.joined}


def seen_owned(views: Views) -> dict[str, tuple[tuple[TaskReplica, ...], int]]:
    return {member_id: (view.owned, view.owned_generation) for member_id, view in views.items()}


def new_rack(f: Fleet, name: str, rack: str) -> None:
    m = f.members[name]
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=m.member_id, member_epoch=m.epoch,
                                       metadata=pb.MemberMetadata(rack=rack))
    assert heartbeat(f.h, request).response.error.code == pb.NONE


def test_a_full_pass_reads_what_each_member_owns_now_and_an_incremental_one_the_kept_views(
        monkeypatch: pytest.MonkeyPatch) -> None:
    handed = Handed(monkeypatch)
    h = Harness(CoordinatorConfig())
    assert h.put_tasks(G, *(f"t{i}" for i in range(12))) == pb.NONE
    f = Fleet(h, ["a", "b", "c"])
    f.join("a")
    f.join("b")
    f.settle()
    a, b = f.members["a"].member_id, f.members["b"].member_id
    f.join("c")
    f.settle()
    c = f.members["c"].member_id
    assert len(handed.full) == 1 and handed.incremental  # the first target, then a join: incremental
    kept = handed.incremental[-1]
    assert set(kept) == {a, b, c} and all(view.owned == () for view in kept.values())

    handed.decline = True  # a's rack changes: the full pass sees it, and what each one runs now
    new_rack(f, "a", "r2")
    before = owned_now(f)
    f.settle()
    full = handed.full[-1]
    assert seen_owned(full) == before and sum(len(o) for o, _ in before.values()) == 12
    assert full[a].rack == "r2" and full[b].rack == ""
    assert handed.incremental[-1][a].rack == "r2"  # the view it declined was rebuilt too
    assert handed.incremental[-1][b] is kept[b]  # b's metadata is the same: its view is kept, not rebuilt

    f.leave("b")  # b's tasks go to a and c: the next full pass sees them owning them, and no b
    f.settle()
    handed.decline = True
    new_rack(f, "c", "r3")
    before = owned_now(f)
    f.settle()
    full = handed.full[-1]
    assert set(full) == {a, c} and b not in handed.incremental[-1]
    assert seen_owned(full) == before and sum(len(o) for o, _ in before.values()) == 12
    f.assert_no_task_run_twice()


def test_a_restarted_coordinator_builds_each_view_from_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "groups.db"
    first = SqliteStore(path)
    h = Harness(CoordinatorConfig(), store=first)
    assert h.put_tasks(G, *(f"t{i}" for i in range(9))) == pb.NONE
    f = Fleet(h, ["a", "b", "c", "d"])
    for name in "abc":
        f.join(name)
    f.settle()
    new_rack(f, "b", "r9")
    f.settle()
    first.close()  # the process stops

    handed = Handed(monkeypatch)
    handed.decline = True
    f.h = again = Harness(CoordinatorConfig(), store=SqliteStore(path))
    assert again.runtime.load() == 1
    before = owned_now(f)
    f.join("d")  # the first computation after the restart: a full pass (no basis here)
    f.settle()
    full = handed.full[0]
    d = f.members["d"].member_id
    assert seen_owned(full) == {**before, d: ((), full[d].owned_generation)}
    assert sum(len(o) for o, _ in before.values()) == 9
    assert full[f.members["b"].member_id].rack == "r9" and full[f.members["a"].member_id].rack == ""
    f.assert_no_task_run_twice()


def test_a_member_that_leaves_while_its_target_is_computed_is_not_installed_and_its_tasks_go_on() -> None:
    def run(effects: list[Effect]) -> list[Offload]:
        return [e for e in effects if isinstance(e, Offload)]

    def beat(request: pb.GroupHeartbeatRequest) -> Any:
        [reply] = [e for e in model.group_heartbeat(request, 1) if hasattr(e, "response")]
        return reply.response  # type: ignore[attr-defined]

    model = CoordinatorModel(clock=FakeClock())
    model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=f"t{i}") for i in range(6)]), 1)
    ids = [beat(pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, client_id=n)).member_id for n in "ab"]
    [job] = run(model.fire(TimerKey("c-assign", G)))
    for effect in job.then(job.job()):
        assert not isinstance(effect, Offload)
    group = model.consumer.groups[G]
    b_had = group.target[ids[1]]
    beat(pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, client_id="c"))  # a join: the next computation
    [job] = run(model.fire(TimerKey("c-assign", G)))
    beat(pb.GroupHeartbeatRequest(group_id=G, member_id=ids[1], member_epoch=-1))  # b leaves meanwhile
    job.then(job.job())
    assert ids[1] not in group.target and group.orphans and group.orphans <= b_had  # its share: the next one's
    every = {TaskReplica(f"t{i}") for i in range(6)}
    assert set().union(*group.target.values()) | group.orphans == every
    [job] = run(model.fire(TimerKey("c-assign", G)))
    job.then(job.job())
    assert not group.orphans and set().union(*group.target.values()) == every
    model.validate()
