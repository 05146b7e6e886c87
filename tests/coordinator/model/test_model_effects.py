"""The group model on its own: each step's effects, exactly, on a fake clock (no store, no runtime)."""

from __future__ import annotations

from typing import Any

import pytest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import (
    ArmTimer,
    CancelTimer,
    Effect,
    Forget,
    Persist,
    RecordLoad,
    Reply,
    TimerKey,
)
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.paths import ROOT

G = "g"


def summary(effects: list[Effect]) -> list[tuple[Any, ...]]:
    """Each effect as a short tuple: what kind, for which key or token, with which code or state."""
    out: list[tuple[Any, ...]] = []
    for e in effects:
        if isinstance(e, Persist):
            out.append(("persist", e.group_id, e.record["state"], e.record["generation"]))
        elif isinstance(e, Forget):
            out.append(("forget", e.group_id))
        elif isinstance(e, ArmTimer):
            out.append(("arm", e.key.kind, e.key.member_id and "m", e.delay_s))
        elif isinstance(e, CancelTimer):
            out.append(("cancel", e.key.kind, e.key.member_id and "m"))
        elif isinstance(e, RecordLoad):
            out.append(("load", e.group_id, e.member_id))
        else:
            assert isinstance(e, Reply)
            out.append(("reply", e.to, type(e.response).__name__, pb.ErrorCode.Name(e.response.error.code)))
    return out


def join_request(member_id: str = "") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(group_id=G, member_id=member_id, client_id="w", session_timeout_ms=10_000,
                               rebalance_timeout_ms=30_000, protocols=["round-robin"])


@pytest.fixture
def model() -> CoordinatorModel:
    return CoordinatorModel(CoordinatorConfig(group_initial_rebalance_delay_ms=0), clock=FakeClock())


def form(model: CoordinatorModel) -> str:
    """One member, Stable at generation 1 (effects checked in the test below)."""
    member_id = model.join(join_request(), 1)[-1].response.member_id  # type: ignore[union-attr]
    model.join(join_request(member_id), 2)
    model.sync(pb.SyncGroupRequest(group_id=G, member_id=member_id, generation=1), 3)
    return member_id


def test_a_group_forms_step_by_step(model: CoordinatorModel) -> None:
    first = model.join(join_request(), 1)
    assert summary(first) == [("arm", "pending", "m", 10.0),  # a pending id lives the session (at most 30 s)
                              ("reply", 1, "JoinGroupResponse", "MEMBER_ID_REQUIRED")]
    member_id = first[-1].response.member_id  # type: ignore[union-attr]
    assert G in model.groups and not model.groups[G].members  # a pending id is no member, nothing to store

    second = model.join(join_request(member_id), 2)
    assert summary(second) == [
        ("persist", G, "AwaitingSync", 1),  # written before anyone hears of generation 1
        ("cancel", "pending", "m"),
        ("arm", "session", "m", 300.0),  # KIP-394: a new member's parked join expires after 5 minutes
        ("cancel", "sync", ""),
        ("arm", "join", "", 30.0),
        ("cancel", "join", ""),
        ("arm", "sync", "", 30.0),
        ("arm", "session", "m", 10.0),
        ("reply", 2, "JoinGroupResponse", "NONE"),
    ]
    sync = model.sync(pb.SyncGroupRequest(group_id=G, member_id=member_id, generation=1), 3)
    assert summary(sync) == [
        ("persist", G, "Stable", 1),
        ("arm", "session", "m", 10.0),  # sent its SyncGroup
        ("arm", "session", "m", 10.0),  # answered
        ("reply", 3, "SyncGroupResponse", "NONE"),  # the sync timer runs on (KAFKA-12890)
    ]


def test_a_heartbeat_only_renews_the_session(model: CoordinatorModel) -> None:
    member_id = form(model)
    effects = model.heartbeat(pb.HeartbeatRequest(group_id=G, member_id=member_id, generation=1), 9)
    assert summary(effects) == [("arm", "session", "m", 10.0), ("reply", 9, "HeartbeatResponse", "NONE")]
    stale = model.heartbeat(pb.HeartbeatRequest(group_id=G, member_id=member_id, generation=0), 10)
    assert summary(stale) == [("reply", 10, "HeartbeatResponse", "ILLEGAL_GENERATION")]


def test_an_expired_session_empties_the_group_and_stores_it(model: CoordinatorModel) -> None:
    member_id = form(model)
    effects = model.fire(TimerKey("session", G, member_id))
    assert summary(effects)[0] == ("persist", G, "Empty", 2)
    assert ("cancel", "session", "m") in summary(effects)
    assert not [e for e in effects if isinstance(e, Reply)]
    assert model.fire(TimerKey("session", G, member_id)) == []  # a stale timer finds nobody


def test_a_held_join_is_answered_when_the_phase_completes(model: CoordinatorModel) -> None:
    a = form(model)
    b = model.join(join_request(), 20)[-1].response.member_id  # type: ignore[union-attr]
    held = model.join(join_request(b), 21)
    assert [e for e in held if isinstance(e, Reply)] == []  # b waits for a to re-join
    assert summary(held)[0] == ("persist", G, "PreparingRebalance", 1)
    done = model.join(join_request(a), 22)
    replies = [(e.to, e.response.generation) for e in done if isinstance(e, Reply)]  # type: ignore[attr-defined]
    assert sorted(replies) == [(21, 2), (22, 2)]
    assert summary(done)[0] == ("persist", G, "AwaitingSync", 2)


def test_load_reports_become_effects_not_writes(model: CoordinatorModel) -> None:
    member_id = form(model)
    report = pb.LoadReport(ts_ms=1, tasks=[pb.TaskLoadReport(task_id="t", msg_rate_in=5.0)])
    effects = model.report_load(pb.ReportLoadRequest(group_id=G, member_id=member_id, report=report), 30)
    assert summary(effects) == [("load", G, member_id), ("reply", 30, "ReportLoadResponse", "NONE")]


def test_deleting_an_empty_group_forgets_its_record(model: CoordinatorModel) -> None:
    member_id = form(model)
    model.leave(pb.LeaveGroupRequest(group_id=G, member_id=member_id), 40)
    effects = model.delete_group(pb.DeleteGroupRequest(group_id=G), 41)
    assert summary(effects) == [("forget", G), ("reply", 41, "DeleteGroupResponse", "NONE")]
    assert G not in model.groups


def test_unload_answers_everything_parked(model: CoordinatorModel) -> None:
    form(model)
    b = model.join(join_request(), 50)[-1].response.member_id  # type: ignore[union-attr]
    model.join(join_request(b), 51)  # parked
    effects = model.unload(pb.NOT_COORDINATOR, "standing by")
    assert summary(effects) == [("reply", 51, "JoinGroupResponse", "NOT_COORDINATOR")]
    assert model.groups == {}


def test_the_model_does_no_io() -> None:
    """Nothing in the model's folder imports a store, a socket, a thread or the real clock (lint-imports keeps
    the layers; this also catches the standard library's I/O)."""
    import ast

    root = ROOT / "coordinator" / "model"
    pure = sorted(path.stem for path in root.glob("*.py"))
    assert {"model", "phases", "join", "sync", "membership", "admin", "effects", "group", "states"} <= set(pure)
    forbidden = {"socket", "threading", "asyncio", "grpc", "sqlite3", "kazoo", "time", "concurrent.futures",
                 "groupcoord.coordinator.storage.store", "groupcoord.coordinator.storage.sqlite_store",
                 "groupcoord.coordinator.ha.zk_store", "groupcoord.coordinator.runtime.runtime",
                 "groupcoord.coordinator.rpc.server"}
    for name in pure:
        tree = ast.parse((root / f"{name}.py").read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & forbidden, f"coordinator/model/{name}.py imports {sorted(imported & forbidden)}"


def test_a_join_phase_answers_its_leader_first(model: CoordinatorModel) -> None:
    """A static leader that came back with new settings has a new id, last in the join order, and is still the
    leader (KIP-345): the phase's end answers it first all the same (its SyncGroup must not wait behind its
    followers': the runtime sends a group's answers in this order)."""
    def static(instance: str, member_id: str = "", protocols: tuple[str, ...] = ("round-robin",)) -> pb.JoinGroupRequest:
        request = join_request(member_id)
        request.instance_id = instance
        request.protocols[:] = protocols
        return request

    model.join(static("ia"), 1)
    model.join(static("ib"), 2)  # held: the group rebalances for b
    group = model.groups[G]
    leader, follower = group.static_members["ia"], group.static_members["ib"]
    formed = model.join(static("ia", leader), 3)  # generation 2: both, a leads
    assert sorted(e.to for e in formed if isinstance(e, Reply)) == [2, 3] and group.leader_id == leader
    back = model.join(static("ia", protocols=("round-robin", "range")), 4)  # a restarted, new settings
    assert [e for e in back if isinstance(e, Reply)] == []  # held: the group rebalances
    assert list(group.members)[-1] == group.leader_id != leader  # the leader's new id, last
    done = model.join(static("ib", follower), 5)
    assert [e.to for e in done if isinstance(e, Reply)] == [4, 5]  # the leader's answer first
