"""Everything a client sends is bounded: each hostile request gets a specific error naming the
limit, and the coordinator keeps nothing of it (issue: reliability under hostile input)."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"
SMALL = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_tasks=5, max_tasks_per_report=3,
                          max_snapshot_bytes=2_000, group_max_pending_members=3, max_splits_per_sync=2,
                          max_task_attributes=2, group_empty_retention_ms=60_000)


def stable(h: Harness, *tasks: str) -> str:
    if tasks:
        assert h.put_tasks(G, *tasks) == pb.NONE
    a, _ = h.join_new(G)
    assert h.sync(G, a, 1, {a: list(tasks)}).code == pb.NONE
    return a


@pytest.mark.parametrize("field", ["client_id", "instance_id", "protocol_type"])
def test_long_or_unprintable_ids_in_join_are_refused_and_nothing_is_kept(field: str) -> None:
    h = Harness(SMALL)
    for value in ("x" * 1_048_576, "evil\n\x1b[31mred"):
        request = pb.JoinGroupRequest(group_id=G, session_timeout_ms=10_000, protocols=["round-robin"],
                                      **{field: value})
        answer = h.run(lambda token, r=request: h.model.join(r, token, "t"), pb.JoinGroupResponse)  # type: ignore[misc]
        assert answer.code == pb.INVALID_REQUEST and field in answer.response.error.message
        assert len(answer.response.error.message) < 300  # the answer does not echo the megabyte back
    assert G not in h.model.groups


def test_member_ids_and_instance_ids_are_bounded_everywhere() -> None:
    h = Harness(SMALL)
    a = stable(h)
    assert h.heartbeat(G, "m" * 100_000, 1) == pb.INVALID_REQUEST
    assert h.heartbeat(G, a, 1, instance_id="i" * 100_000) == pb.INVALID_REQUEST
    assert h.leave(G, a + "\n") == pb.INVALID_REQUEST
    assert h.heartbeat(G, a, 1) == pb.NONE


def test_the_catalog_is_bounded_per_group_not_only_per_request() -> None:
    h = Harness(SMALL)
    assert h.put_tasks(G, "a", "b", "c") == pb.NONE
    assert h.put_tasks(G, "d", "e", "f") == pb.INVALID_REQUEST  # 6 > group_max_tasks 5
    assert sorted(h.group(G).tasks) == ["a", "b", "c"]
    assert h.put_tasks(G, "a", "d") == pb.NONE  # replacing one and adding one: 4


def test_task_fields_are_bounded() -> None:
    h = Harness(SMALL)
    for task in (pb.Task(task_id="t" * 300), pb.Task(task_id="t", pool="p" * 300),
                 pb.Task(task_id="t", attributes={"a": "1", "b": "2", "c": "3"}),
                 pb.Task(task_id="t", attributes={"a": "v" * 2_000}), pb.Task(task_id="t\x00"),
                 pb.Task(task_id="t", weight=float("nan")), pb.Task(task_id="t", replicas=2**31 - 1)):
        request = pb.PutTasksRequest(group_id=G, tasks=[task])
        answer = h.run(lambda token, r=request: h.model.put_tasks(r, token), pb.PutTasksResponse)  # type: ignore[misc]
        assert answer.code == pb.INVALID_REQUEST, task
    assert G not in h.model.groups


def test_a_load_report_is_bounded() -> None:
    h = Harness(SMALL)
    a = stable(h)
    report = pb.LoadReport(tasks=[pb.TaskLoadReport(task_id=f"t{i}") for i in range(4)])
    request = pb.ReportLoadRequest(group_id=G, member_id=a, report=report)
    answer = h.run(lambda token: h.model.report_load(request, token), pb.ReportLoadResponse)
    assert answer.code == pb.INVALID_REQUEST and "max_tasks_per_report" in answer.response.error.message
    assert h.effects and not [e for e in h.effects if type(e).__name__ == "RecordLoad"]


def test_snapshots_are_bounded_in_size_and_in_time() -> None:
    h = Harness(SMALL)
    stable(h)
    now = h.clock.wall_ms()

    def publish(snapshot: pb.LoadSnapshot) -> object:
        request = pb.PublishLoadSnapshotRequest(snapshot=snapshot)
        return h.run(lambda token: h.model.publish_load_snapshot(request, token), pb.PublishLoadSnapshotResponse)

    big = pb.LoadSnapshot(group_id=G, snapshot_id="big", created_ms=now,
                          tasks=[pb.TaskLoadStats(task_id=f"t{i}") for i in range(500)])
    assert publish(big).code == pb.INVALID_REQUEST  # type: ignore[attr-defined]
    future = pb.LoadSnapshot(group_id=G, snapshot_id="pin", created_ms=2**63 - 1)
    assert publish(future).code == pb.INVALID_REQUEST  # type: ignore[attr-defined]
    assert h.group(G).load_snapshot is None
    assert publish(pb.LoadSnapshot(group_id=G, snapshot_id="ok", created_ms=now)).code == pb.NONE  # type: ignore[attr-defined]
    assert publish(pb.LoadSnapshot(group_id=G, snapshot_id="later", created_ms=now + 1)).code == pb.NONE  # type: ignore[attr-defined]
    assert h.group(G).load_snapshot.snapshot_id == "later"


def test_pending_member_ids_are_bounded_and_live_at_most_the_coordinators_bound() -> None:
    h = Harness(SMALL)
    firsts = [h.join(G, session_timeout_ms=600_000) for _ in range(4)]
    assert [p.code for p in firsts] == [pb.MEMBER_ID_REQUIRED] * 4  # the oldest made room for the fourth
    assert len(h.group(G).pending_members) == 3
    pushed_out = h.join(G, firsts[0].response.member_id)
    assert pushed_out.code == pb.UNKNOWN_MEMBER_ID
    # they asked for 600 s sessions; an id waits at most group_pending_member_timeout_ms (30 s)
    h.advance(29.9)
    assert len(h.group(G).pending_members) == 3
    h.advance(0.2)
    assert G not in h.model.groups  # nothing but pending ids: the group is gone, not stored Empty
    short = h.join(G, session_timeout_ms=10_000)  # a shorter session than the bound: that session
    h.advance(10.1)
    assert G not in h.model.groups and short.code == pb.MEMBER_ID_REQUIRED


def test_a_leaders_split_goes_through_the_catalog_rules() -> None:
    h = Harness(SMALL)
    a = stable(h, "big")
    for child in (pb.Task(task_id="c\x00"), pb.Task(task_id="c", weight=float("nan")),
                  pb.Task(task_id="c", replicas=2**31 - 1)):
        split = pb.TaskSplit(parent_task_id="big", children=[child, pb.Task(task_id="d")])
        a_join = h.join(G, a)
        generation = a_join.response.generation
        bad = h.sync(G, a, generation, {a: ["c", "d"]}, splits=[split])
        assert bad.code == pb.INVALID_ASSIGNMENT and "split child" in bad.response.error.message
        assert h.state(G) == "PreparingRebalance" and sorted(h.group(G).tasks) == ["big"]
    too_many = [pb.TaskSplit(parent_task_id=f"p{i}", children=[pb.Task(task_id=f"c{i}")]) for i in range(3)]
    generation = h.join(G, a).response.generation
    assert "max_splits_per_sync" in h.sync(G, a, generation, {a: []}, splits=too_many).response.error.message


def test_the_sync_timeout_always_ends_awaiting_sync() -> None:
    """Even when nobody owes a SyncGroup any more but the assignment never completed."""
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(G, rebalance_timeout_ms=10_000, session_timeout_ms=30_000)
    h.group(G).pending_sync.clear()  # as if the leader's SyncGroup arrived and was lost midway
    h.advance(10.1)
    assert h.state(G) == "PreparingRebalance"
    assert h.heartbeat(G, a, 1) == pb.REBALANCE_IN_PROGRESS


def test_an_empty_group_without_a_catalog_is_deleted_after_the_retention() -> None:
    h = Harness(SMALL)
    a = stable(h)
    h.leave(G, a)
    assert h.state(G) == "Empty"
    h.advance(59.0)
    assert G in h.model.groups
    h.advance(1.1)
    assert G not in h.model.groups and "g" not in h.runtime.records()
    keep = Harness(SMALL)
    b = stable(keep, "t1")
    keep.leave(G, b)
    keep.advance(120.0)
    assert G in keep.model.groups  # a catalog keeps a group


def test_a_join_offering_too_many_assignors_is_refused() -> None:
    h = Harness(SMALL)
    assert h.join(G, protocols=tuple(f"a{i}" for i in range(65))).code == pb.INVALID_REQUEST
    assert G not in h.model.groups


def test_free_text_from_a_leader_reaches_logs_and_terminals_escaped(caplog: pytest.LogCaptureFixture) -> None:
    """An assignor error with a newline and an ANSI escape is written escaped (log, last_error, the
    leader's answer); an unassigned reason with control characters is refused."""
    h = Harness(SMALL)
    a = stable(h, "big")
    generation = h.join(G, a).response.generation
    with caplog.at_level("WARNING"):
        failed = h.sync(G, a, generation, assignor_error="boom\n\x1b[31mFAKE LOG LINE")
    assert failed.code == pb.INVALID_ASSIGNMENT
    for text in (failed.response.error.message, h.group(G).last_error, *(r.getMessage() for r in caplog.records)):
        assert "\n" not in text and "\x1b" not in text
    assert "boom\\n\\x1b[31mFAKE LOG LINE" in h.group(G).last_error
    generation = h.join(G, a).response.generation
    sneaky = pb.UnassignedReplica(task=pb.TaskReplica(task_id="big"), reason="no\rroom")
    refused = h.sync(G, a, generation, {a: []}, unassigned=[sneaky])
    assert refused.code == pb.INVALID_ASSIGNMENT and "printable" in refused.response.error.message
