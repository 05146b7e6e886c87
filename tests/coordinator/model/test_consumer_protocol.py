"""The consumer protocol (KIP-848) in the coordinator's model, on a fake clock: joins, the target from
the server-side assignor, tasks moving only once released, leaves, fencing, static members, the
catalog moving the group epoch, bad requests, and a property over random orders of events."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, TaskReplica
from groupcoord.assignors.registry import get_assignor, register
from groupcoord.coordinator.config import ConfigError, CoordinatorConfig
from groupcoord.coordinator.model.effects import Offload
from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import FailingStore, Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G, heartbeat, tasks_of


def harness() -> Harness:
    return Harness(CoordinatorConfig())


def fleet(names: str, tasks: int = 6, *, static: bool = False) -> Fleet:
    h = harness()
    assert h.put_tasks(G, *(f"t{i}" for i in range(tasks))) == pb.NONE
    return Fleet(h, list(names), static=static)


def test_two_members_get_disjoint_tasks_covering_the_catalog() -> None:
    f = fleet("ab")
    first = f.join("a")
    assert first.error.code == pb.NONE and first.member_epoch == 1 and first.heartbeat_interval_ms == 5_000
    assert first.HasField("assignment") and not first.assignment.tasks  # the target is not computed yet
    f.join("b")
    f.settle()
    running = f.running()
    assert running["a"].isdisjoint(running["b"]) and len(running["a"]) == len(running["b"]) == 3
    assert running["a"] | running["b"] == {TaskReplica(f"t{i}") for i in range(6)}
    quiet = f.beat("a")  # nothing changed: no assignment in the answer
    assert quiet.error.code == pb.NONE and not quiet.HasField("assignment")


def test_the_target_is_computed_off_the_step_once_per_interval() -> None:
    f = fleet("abc")
    f.join("a")
    f.join("b")  # two joins within the interval: one computation
    group = f.h.model.consumer.groups[G]
    assert group.epoch == 3 and group.target_epoch == 1
    f.h.advance(0.0)
    assert group.target_epoch == 3 and len(group.target) == 2
    f.join("c")
    assert [e for e in f.h.effects if isinstance(e, Offload)] == []  # a join never runs the assignor itself
    f.h.advance(0.05)
    assert group.target_epoch == 3  # the interval (100 ms) since the last computation has not passed
    f.h.advance(0.06)
    assert group.target_epoch == 4


def test_a_third_member_gets_tasks_only_after_their_owner_released_them() -> None:
    f = fleet("abc")
    f.join("a")
    f.join("b")
    f.settle()
    f.join("c")
    f.h.advance(0.2)  # the new target: c takes two tasks from a and b
    group = f.h.model.consumer.groups[G]
    c_target = group.target[f.members["c"].member_id]
    assert len(c_target) == 2
    answer_c = f.beat("c")  # c first: its tasks are still held by a and b
    assert not tasks_of(answer_c) & c_target
    assert group.members[f.members["c"].member_id].reconciled.state is MemberState.UNRELEASED_TASKS
    answer_a = f.beat("a", report=False)  # a is asked to give one up, and says nothing yet
    a_member = group.members[f.members["a"].member_id]
    assert a_member.reconciled.state is MemberState.UNREVOKED_TASKS and answer_a.member_epoch == a_member.epoch
    f.beat("c")
    f.assert_no_task_run_twice()
    f.settle()
    assert len(f.running()["c"]) == 2 and sum(map(len, f.running().values())) == 6


def test_a_member_leaving_frees_its_tasks_at_once() -> None:
    f = fleet("ab")
    f.join("a")
    f.join("b")
    f.settle()
    answer = f.leave("a")
    assert answer.error.code == pb.NONE and answer.member_epoch == -1
    f.settle()
    assert f.running() == {"b": {TaskReplica(f"t{i}") for i in range(6)}}
    assert len(f.h.model.consumer.groups[G].members) == 1


def test_a_stale_epoch_is_fenced_and_the_previous_one_accepted_once() -> None:
    f = fleet("a")
    f.join("a")
    f.h.advance(0.2)
    f.beat("a")
    a = f.members["a"]
    ahead = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_id=a.member_id, member_epoch=a.epoch + 1))
    assert ahead.code == pb.FENCED_MEMBER_EPOCH and "epoch 0" in ahead.response.error.message
    assert f.h.put_tasks(G, "t6") == pb.NONE  # a's target grows
    f.h.advance(0.2)
    previous = a.epoch
    f.beat("a", lose_answer=True)  # a is now at a newer epoch; it did not hear so
    assert f.h.model.consumer.groups[G].members[a.member_id].epoch > previous
    again = f.beat("a")  # the previous epoch, owning no more than its assignment: accepted
    assert again.error.code == pb.NONE and again.HasField("assignment")
    stale = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_id=a.member_id, member_epoch=previous - 1))
    assert stale.code == pb.FENCED_MEMBER_EPOCH


def test_a_session_that_ends_frees_the_tasks_and_moves_the_group_epoch() -> None:
    f = fleet("ab")
    f.join("a")
    f.join("b")
    f.settle()
    group = f.h.model.consumer.groups[G]
    epoch, a = group.epoch, f.members["a"]
    a_id, a_epoch = a.member_id, a.epoch
    for _ in range(4):  # only b heartbeats, for longer than a's session
        f.h.advance(2.0)
        f.beat("b")
    assert a_id not in group.members and group.epoch > epoch
    f.expire_silent()
    f.settle()
    assert f.running() == {"b": {TaskReplica(f"t{i}") for i in range(6)}}
    late = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_id=a_id, member_epoch=a_epoch))
    assert late.code == pb.UNKNOWN_MEMBER_ID


def test_a_member_that_keeps_its_tasks_past_its_rebalance_timeout_is_removed() -> None:
    f = fleet("ab")
    f.join("a")
    f.settle()
    f.join("b")
    f.h.advance(0.2)
    f.beat("a", report=False)  # asked to give up; never says it did
    a_id = f.members["a"].member_id
    assert f.h.model.consumer.groups[G].members[a_id].reconciled.state is MemberState.UNREVOKED_TASKS
    for _ in range(4):
        f.h.advance(2.0)
        f.beat("a", report=False)
        f.beat("b")
    assert a_id not in f.h.model.consumer.groups[G].members


def test_a_static_member_away_keeps_its_tasks_and_a_second_live_one_is_refused() -> None:
    f = fleet("ab", static=True)
    f.join("a")
    f.join("b")
    f.settle()
    a_tasks = f.running()["a"]
    group = f.h.model.consumer.groups[G]
    epoch = group.epoch
    twin = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, instance_id="i-a",
                                                   session_timeout_ms=6_000))
    assert twin.code == pb.UNRELEASED_INSTANCE_ID and "i-a" in twin.response.error.message
    away = f.leave("a", epoch=-2)
    assert away.error.code == pb.NONE and away.member_epoch == -2 and group.epoch == epoch
    f.settle()  # b does not get a's tasks while a is away
    assert f.running()["b"].isdisjoint(a_tasks)
    back = f.join("a")  # a new process of instance i-a: a's tasks back, no rebalance
    assert back.error.code == pb.NONE and tasks_of(back) == a_tasks and group.epoch == epoch
    old = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_id=away.member_id, member_epoch=1,
                                                  instance_id="i-a"))
    assert old.code == pb.FENCED_INSTANCE_ID


def test_a_static_member_away_past_its_session_loses_its_tasks() -> None:
    f = fleet("ab", static=True)
    f.join("a")
    f.join("b")
    f.settle()
    f.leave("a", epoch=-2)
    for _ in range(4):
        f.h.advance(2.0)
        f.beat("b")
    f.settle()
    assert f.running() == {"b": {TaskReplica(f"t{i}") for i in range(6)}}


def test_catalog_edits_move_the_group_epoch_and_reach_the_members() -> None:
    f = fleet("ab", tasks=2)
    f.join("a")
    f.join("b")
    f.settle()
    group = f.h.model.consumer.groups[G]
    epoch = group.epoch
    assert f.h.put_tasks(G, "t2", "t3") == pb.NONE
    assert group.epoch == epoch + 1
    f.settle()
    assert sum(map(len, f.running().values())) == 4
    assert f.h.admin("delete_tasks", pb.DeleteTasksRequest(group_id=G, task_ids=["t0", "t1"])).error.code == pb.NONE
    f.settle()
    assert set().union(*f.running().values()) == {TaskReplica("t2"), TaskReplica("t3")}


def test_classic_members_join_a_consumer_group_as_classic_members_of_it() -> None:
    """Mixing is test_conversion.py's subject; here: where each request goes, and what is refused."""
    f = fleet("a")
    f.join("a")
    join = f.h.join(G)  # a classic member of a consumer group: an id at once, no leader
    assert join.code == pb.NONE and join.response.member_id and join.response.leader_id == ""
    assert f.h.model.consumer.groups[G].classic_members == 1
    deleted = f.h.admin("delete_group", pb.DeleteGroupRequest(group_id=G))
    assert deleted.error.code == pb.NON_EMPTY_GROUP
    h = harness()
    h.join("pending")  # only an id handed out: its first member is joining; retry (it converts once Stable)
    refused = heartbeat(h, pb.GroupHeartbeatRequest(group_id="pending", member_epoch=0, session_timeout_ms=6_000))
    assert refused.code == pb.REBALANCE_IN_PROGRESS and "still joining" in refused.response.error.message
    h.join_new("classic")  # a classic group mid-rebalance converts only once Stable
    refused = heartbeat(h, pb.GroupHeartbeatRequest(group_id="classic", member_epoch=0, session_timeout_ms=6_000))
    assert refused.code == pb.REBALANCE_IN_PROGRESS and "only when Stable" in refused.response.error.message
    f.leave("a")  # the last consumer member gone: the classic one has the group, back to classic
    assert G not in f.h.model.consumer.groups and f.h.state(G) == "PreparingRebalance"
    assert f.h.join(G).code == pb.MEMBER_ID_REQUIRED


BAD = [
    ({"member_epoch": -3}, pb.INVALID_REQUEST, "member_epoch"),
    ({"member_epoch": 4}, pb.INVALID_REQUEST, "member_id"),
    ({"member_epoch": -2, "member_id": "m"}, pb.INVALID_REQUEST, "instance_id"),
    ({"member_epoch": 0, "session_timeout_ms": 10}, pb.INVALID_SESSION_TIMEOUT, "session_timeout_ms"),
    ({"member_epoch": 0, "rebalance_timeout_ms": -5}, pb.INVALID_REQUEST, "rebalance_timeout_ms"),
    ({"member_epoch": 0, "assignor": "no-such"}, pb.UNSUPPORTED_ASSIGNOR, "no-such"),
    ({"member_epoch": 0, "instance_id": "x" * 300}, pb.INVALID_REQUEST, "instance_id"),
    ({"member_epoch": 0, "owned": pb.TaskReplicaList(tasks=[pb.TaskReplica(task_id="t0")])}, pb.INVALID_REQUEST,
     "owns nothing"),
    ({"member_epoch": 5, "member_id": "m", "owned": pb.TaskReplicaList(tasks=[pb.TaskReplica(task_id="t", replica=-1)])},
     pb.INVALID_REQUEST, "replica"),
    ({"member_epoch": 5, "member_id": "nobody"}, pb.UNKNOWN_MEMBER_ID, "nobody"),
    ({"member_epoch": 0, "metadata": pb.MemberMetadata(user_data=b"x" * 2_000_000)}, pb.INVALID_REQUEST,
     "max_metadata_bytes"),
]


@pytest.mark.parametrize(("fields", "code", "named"), BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)])
def test_bad_requests_get_a_specific_error_and_change_nothing(fields: dict[str, object], code: int,
                                                             named: str) -> None:
    h = harness()
    answer = heartbeat(h, pb.GroupHeartbeatRequest(group_id=G, **fields))  # type: ignore[arg-type]
    assert answer.code == code and named in answer.response.error.message
    assert G not in h.model.consumer.groups and G not in h.model.groups


def test_the_group_max_size_holds() -> None:
    h = Harness(CoordinatorConfig(group_max_size=1))
    f = Fleet(h, ["a", "b"])
    assert f.join("a").error.code == pb.NONE
    assert f.join("b").error.code == pb.GROUP_MAX_SIZE_REACHED


# ---------------------------------------------------------------------- the property

OPS = st.lists(st.tuples(st.sampled_from(["join", "beat", "beat", "beat", "lose", "silent", "leave", "away",
                                          "advance", "catalog"]),
                         st.integers(0, 3), st.floats(0.01, 7.0)), min_size=1, max_size=40)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, static=st.booleans())
def test_no_task_is_run_by_two_members_whatever_the_order(ops: list[tuple[str, int, float]], static: bool) -> None:
    f = fleet("abcd", tasks=5, static=static)
    names = list(f.members)
    catalog = 5
    for op, who, seconds in ops:
        name = names[who]
        m = f.members[name]
        if op == "join" and not m.joined:
            f.join(name)
        elif op in ("beat", "lose", "silent") and m.joined:
            f.beat(name, lose_answer=op == "lose", report=op != "silent")
        elif op == "leave" and m.joined:
            f.leave(name)
        elif op == "away" and m.joined and static:
            f.leave(name, epoch=-2)
        elif op == "advance":
            f.h.advance(seconds)
            f.expire_silent()
        elif op == "catalog":
            catalog += 1
            f.h.put_tasks(G, f"t{catalog}")
        f.assert_no_task_run_twice()  # the Harness also checks the model's own invariants each step
    f.settle()
    f.assert_no_task_run_twice()
    for _ in range(7):  # the live members go on; a static member away stays away past its session
        f.h.advance(1.0)
        for name, m in f.members.items():
            if m.joined:
                f.beat(name)
                f.assert_no_task_run_twice()
    f.settle()
    live = [m for m in f.members.values() if m.joined]
    if live:  # once everyone has heartbeated a few times, every task runs somewhere
        assert sum(len(m.running) for m in live) == catalog


class Recording:
    """An assignor that records the load snapshot it was given, then round-robins."""

    name = "test-recording"

    def __init__(self) -> None:
        self.snapshots: list[object] = []

    def assign(self, context: AssignmentContext) -> Assignment:
        self.snapshots.append(context.load_snapshot)
        return get_assignor("round-robin").assign(context)


class Failing:
    name = "test-failing"

    def assign(self, context: AssignmentContext) -> Assignment:
        raise AssignorError("cannot place anything today")


def test_a_load_aware_assignor_gets_the_latest_snapshot() -> None:
    recording = Recording()
    register(recording, replace=True)
    f = fleet("a")
    snapshot = pb.LoadSnapshot(group_id=G, snapshot_id="s-1", created_ms=f.h.clock.wall_ms(),
                               workers=[pb.WorkerLoadStats(worker_id="w", cpu_usage=1.0, cpu_limit=4.0)])
    published = f.h.admin("publish_load_snapshot", pb.PublishLoadSnapshotRequest(snapshot=snapshot))
    assert published.error.code == pb.NONE
    f.join("a", assignor="test-recording")
    f.settle()
    assert recording.snapshots and recording.snapshots[-1].snapshot_id == "s-1"  # type: ignore[attr-defined]
    assert len(f.running()["a"]) == 6


def test_an_assignor_failure_keeps_the_previous_target() -> None:
    register(Failing(), replace=True)
    f = fleet("ab")
    f.join("a", assignor="test-failing")
    f.join("b", assignor="test-failing")
    f.settle()
    group = f.h.model.consumer.groups[G]
    assert group.target_epoch < group.epoch and "cannot place anything today" in group.last_error
    assert f.running() == {}
    third = heartbeat(f.h, pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, assignor="round-robin",
                                                    session_timeout_ms=6_000))
    assert third.code == pb.NONE and group.assignor == "test-failing"  # named by two members of three


def _state(h: Harness) -> tuple[object, ...]:
    group = h.model.consumer.groups[G]
    members = {i: (m.reconciled, m.previous_epoch, m.away, m.instance_id, m.metadata.rack)
               for i, m in group.members.items()}
    return group.epoch, group.target_epoch, group.assignor, group.target, group.holder, members


def test_a_restarted_coordinator_resumes_the_group_where_it_was(tmp_path: Path) -> None:
    """Persisted with the group's record: a new process on the same SQLite file goes on from the same
    epochs, targets and holders; no member is fenced, and a task being handed over still waits."""
    path = tmp_path / "groups.db"
    first_store = SqliteStore(path)
    h = Harness(CoordinatorConfig(), store=first_store)
    assert h.put_tasks(G, *(f"t{i}" for i in range(6))) == pb.NONE
    f = Fleet(h, ["a", "b", "c"], static=True)
    f.join("a", metadata=pb.MemberMetadata(rack="r1"))
    f.join("b")
    f.settle()
    f.join("c")
    f.h.advance(0.2)
    f.beat("a", report=False)  # a is asked to give a task up: mid-handover when the process stops
    f.leave("b", epoch=-2)  # b away, its tasks kept for it
    before = _state(h)
    assert any(m[0].state is MemberState.UNREVOKED_TASKS for m in before[5].values())  # type: ignore[index]

    first_store.close()  # the first process stops
    f.h = restarted = Harness(CoordinatorConfig(), store=SqliteStore(path))
    assert restarted.runtime.load() == 1  # a standalone start-up loads its store
    assert _state(restarted) == before
    c_answer = f.beat("c")
    assert c_answer.error.code == pb.NONE and not tasks_of(c_answer) & f.members["a"].running
    f.assert_no_task_run_twice()
    back = f.join("b")
    assert back.error.code == pb.NONE and tasks_of(back)
    f.settle()
    assert all(m.joined for m in f.members.values())  # nobody fenced by the restart
    assert sum(map(len, f.running().values())) == 6
    f.assert_no_task_run_twice()


def test_a_failed_write_puts_the_group_back_and_the_member_hears_nothing_of_it() -> None:
    store = FailingStore(MemoryStore())
    h = Harness(CoordinatorConfig(), store=store)
    assert h.put_tasks(G, *(f"t{i}" for i in range(4))) == pb.NONE
    f = Fleet(h, ["a", "b"])
    f.join("a")
    f.settle()
    before = _state(h)
    store.fail_next_save()
    refused = f.join("b")  # its join is written first: the write fails, so does the answer
    assert refused.error.code == pb.COORDINATOR_NOT_AVAILABLE
    assert _state(h) == before and f.members["b"].member_id == ""
    f.join("b")
    f.settle()
    assert len(f.running()["a"]) == len(f.running()["b"]) == 2


def test_the_server_sets_the_cadence_from_its_config_and_checks_its_relations() -> None:
    h = Harness(CoordinatorConfig(consumer_heartbeat_interval_ms=1_000, consumer_session_timeout_ms=8_000))
    joined = heartbeat(h, pb.GroupHeartbeatRequest(group_id=G, member_epoch=0)).response
    assert joined.heartbeat_interval_ms == 1_000
    assert h.model.consumer.groups[G].members[joined.member_id].session_timeout_ms == 8_000
    with pytest.raises(ConfigError, match="consumer_heartbeat_interval_ms"):
        CoordinatorConfig(consumer_heartbeat_interval_ms=45_000)
    with pytest.raises(ConfigError, match="consumer_session_timeout_ms"):
        CoordinatorConfig(consumer_session_timeout_ms=0)
    # the classic protocol's bounds do not reach it: narrowing them does not stop a coordinator starting
    assert CoordinatorConfig(group_max_session_timeout_ms=10_000).consumer_session_timeout_ms == 45_000
    with pytest.raises(ConfigError, match="consumer_assignment_interval_ms"):
        CoordinatorConfig.from_mapping({"consumer_assignment_interval_ms": -1})
