"""The coordinator's rebalance protocol on a fake clock: timers, failures, bad input."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import FailingStore, FakeOffice, Harness
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"


def form(h: Harness, count: int, tasks: tuple[str, ...] = ("t1", "t2", "t3")) -> list[str]:
    """``count`` members Stable at generation 1 (round-robin by hand), first is leader."""
    h.put_tasks(G, *tasks)
    ids = []
    pendings = []
    for _ in range(count):
        member_id, pending = h.join_new(G)
        ids.append(member_id)
        pendings.append(pending)
        if h.state(G) == "AwaitingSync":  # the first member completed a phase alone: re-join the others
            break
    return ids


def test_two_step_join_leaves_no_ghost_member() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    first = h.join(G)
    retried = h.join(G)  # the client retried its first join: a second id, still only pending
    assert first.code == retried.code == pb.MEMBER_ID_REQUIRED
    assert first.response.member_id != retried.response.member_id
    held = h.join(G, first.response.member_id)
    assert not held.done
    h.advance(10.5)  # the unused id expires after its session timeout
    assert retried.response.member_id not in h.group(G).pending_members
    assert held.code == pb.NONE
    assert list(h.group(G).members) == [first.response.member_id]


def test_initial_delay_collects_a_fleet_into_one_generation() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    joins = [h.join_new(G) for _ in range(5)]
    assert not any(p.done for _, p in joins)
    h.advance(2.9)
    assert not any(p.done for _, p in joins)
    h.advance(3.2)  # extended once: members kept arriving during the first delay
    assert all(p.code == pb.NONE for _, p in joins)
    assert {p.response.generation for _, p in joins} == {1}
    leader = joins[0][0]
    assert all(p.response.leader_id == leader for _, p in joins)
    assert len(joins[0][1].response.members) == 5
    assert len(joins[1][1].response.members) == 0  # only the leader sees the members


def test_join_phase_completes_early_when_everyone_rejoined() -> None:
    h = Harness()
    a, ja = h.join_new(G)
    assert ja.code == pb.NONE and h.state(G) == "AwaitingSync"
    h.sync(G, a, 1, {a: []})
    _b, jb = h.join_new(G)
    assert not jb.done
    ra = h.join(G, a)
    assert ra.code == jb.code == pb.NONE  # no timer needed
    assert ra.response.generation == 2


def test_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout() -> None:
    h = Harness()
    a, _ = h.join_new(G, rebalance_timeout_ms=5000)
    h.sync(G, a, 1, {a: []})
    b, jb = h.join_new(G, rebalance_timeout_ms=5000)
    h.advance(4.9)
    assert not jb.done
    assert h.heartbeat(G, a, 1) == pb.REBALANCE_IN_PROGRESS  # a is alive but never re-joins
    h.advance(0.2)
    assert jb.code == pb.NONE
    assert list(h.group(G).members) == [b]
    assert jb.response.leader_id == b  # the leader left the generation: re-elected


def test_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    h.put_tasks(G, "t1")
    (_a, ja), (b, jb) = h.join_new(G, rebalance_timeout_ms=4000), h.join_new(G, rebalance_timeout_ms=4000)
    h.advance(2.1)
    assert ja.code == jb.code == pb.NONE
    follower_sync = h.sync(G, b, 1)
    assert not follower_sync.done
    h.advance(4.1)  # the leader never syncs
    assert follower_sync.code == pb.REBALANCE_IN_PROGRESS
    assert list(h.group(G).members) == [b]
    assert h.state(G) == "PreparingRebalance"


def test_session_expiry_removes_a_silent_member_and_parked_members_stay_alive() -> None:
    h = Harness()
    h.put_tasks(G, "t1", "t2")
    a, _ = h.join_new(G, session_timeout_ms=6000)
    h.sync(G, a, 1, {a: ["t1", "t2"]})
    b, jb = h.join_new(G, session_timeout_ms=6000, rebalance_timeout_ms=60_000)
    # b is parked in JoinGroup for longer than its session timeout: still a member
    h.advance(5)
    assert h.heartbeat(G, a, 1) == pb.REBALANCE_IN_PROGRESS
    h.advance(5)
    assert b in h.group(G).members
    ra = h.join(G, a, session_timeout_ms=6000)
    assert ra.code == jb.code == pb.NONE
    gen = ra.response.generation
    h.sync(G, a, gen, {a: ["t1"], b: ["t2"]})
    h.sync(G, b, gen)
    assert h.state(G) == "Stable"
    for _ in range(2):  # a keeps heartbeating, b is silent
        h.advance(2.5)
        assert h.heartbeat(G, a, gen) == pb.NONE
    assert b in h.group(G).members
    h.advance(1.1)  # 6.1 s since b's sync: its session expired
    assert b not in h.group(G).members
    assert h.heartbeat(G, a, gen) == pb.REBALANCE_IN_PROGRESS


def test_last_member_leaving_empties_the_group() -> None:
    h = Harness()
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    assert h.leave(G, a) == pb.NONE
    assert h.state(G) == "Empty"
    assert h.group(G).generation == 2


def test_leader_is_re_elected_when_it_leaves() -> None:
    h = Harness()
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    b, _jb = h.join_new(G)
    h.join(G, a)
    h.sync(G, a, 2, {a: [], b: []})
    assert h.leave(G, a) == pb.NONE
    rb = h.join(G, b)
    assert rb.code == pb.NONE and rb.response.leader_id == b


def test_protocol_is_voted_among_the_common_ones() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    (_, ja) = h.join_new(G, protocols=("sticky", "round-robin"))
    (_, jb) = h.join_new(G, protocols=("round-robin", "sticky"))
    (_, jc) = h.join_new(G, protocols=("sticky", "round-robin", "kafka-replica-shift"))
    h.advance(3)
    assert ja.response.protocol == jb.response.protocol == jc.response.protocol == "sticky"


def test_protocol_mismatch_is_refused() -> None:
    h = Harness()
    h.join_new(G, protocols=("sticky",))
    first = h.join(G, protocols=("round-robin",))
    assert first.code == pb.INCONSISTENT_GROUP_PROTOCOL
    assert "sticky" in first.response.error.message


@pytest.mark.parametrize("timeout_ms", [1, 5999, 1_800_001])
def test_session_timeout_outside_bounds(timeout_ms: int) -> None:
    h = Harness()
    p = h.join(G, session_timeout_ms=timeout_ms)
    assert p.code == pb.INVALID_SESSION_TIMEOUT
    assert str(timeout_ms) in p.response.error.message
    assert G not in h.model.groups or not h.group(G).members


def test_empty_group_id_and_empty_protocols_and_big_metadata() -> None:
    h = Harness(CoordinatorConfig(max_metadata_bytes=100))
    assert h.join("").code == pb.INVALID_GROUP_ID
    assert h.join(G, protocols=()).code == pb.INCONSISTENT_GROUP_PROTOCOL
    big = h.join(G, metadata=pb.MemberMetadata(user_data=b"x" * 200))
    assert big.code == pb.INVALID_REQUEST and "limit is 100" in big.response.error.message


def test_max_group_size() -> None:
    h = Harness(CoordinatorConfig(group_max_size=2, group_initial_rebalance_delay_ms=1000))
    h.join_new(G)
    h.join_new(G)
    third = h.join(G)
    assert third.code == pb.GROUP_MAX_SIZE_REACHED


def test_unknown_member_and_generations() -> None:
    h = Harness()
    a, _ = h.join_new(G)
    assert h.join(G, "made-up").code == pb.UNKNOWN_MEMBER_ID
    assert h.sync(G, "made-up", 1).code == pb.UNKNOWN_MEMBER_ID
    assert h.sync(G, a, 0).code == pb.ILLEGAL_GENERATION
    assert h.sync(G, a, 7).code == pb.ILLEGAL_GENERATION  # a future generation too
    assert h.heartbeat("no-such-group", a, 1) == pb.UNKNOWN_MEMBER_ID
    assert h.leave(G, "made-up") == pb.UNKNOWN_MEMBER_ID


def _leader_sync(h: Harness, assignments: dict[str, list[str]], **extra: object) -> tuple[str, str, object]:
    h.put_tasks(G, "t1", "t2", "t3")
    h2 = h
    a, _ = h2.join_new(G)
    b, _jb = h2.join_new(G)
    h2.join(G, a)
    named = {k.replace("A", a).replace("B", b): v for k, v in assignments.items()}
    return a, b, h2.sync(G, a, 2, named, **extra)


@pytest.mark.parametrize(
    ("assignments", "reason"),
    [
        ({"A": ["t1", "t2", "t3"], "stranger": []}, "not a member"),
        ({"A": ["t1", "t2"], "B": ["t3", "t9"]}, "not in the catalog"),
        ({"A": ["t1", "t2"], "B": ["t2", "t3"]}, "assigned twice"),
        ({"A": ["t1"], "B": ["t2"]}, "not assigned"),
        ({"A": ["t1", "t2", "t3#1"], "B": []}, "does not exist"),
    ],
    ids=["unknown-member", "unknown-task", "task-twice", "missing-task", "bad-replica"],
)
def test_invalid_assignment_is_refused_and_the_group_rebalances(assignments: dict[str, list[str]],
                                                                 reason: str) -> None:
    h = Harness()
    _a, _b, result = _leader_sync(h, assignments)
    assert result.code == pb.INVALID_ASSIGNMENT  # type: ignore[attr-defined]
    assert reason in result.response.error.message  # type: ignore[attr-defined]
    assert h.state(G) == "PreparingRebalance"
    assert reason in h.group(G).last_error
    assert h.group(G).assignment == {}


def test_replicas_on_distinct_members_and_pools() -> None:
    h = Harness()
    h.put_tasks(G, "r", replicas=2)
    a, _ = h.join_new(G)
    b, _ = h.join_new(G)
    h.join(G, a)
    bad = h.sync(G, a, 2, {a: ["r#0", "r#1"], b: []})
    assert bad.code == pb.INVALID_ASSIGNMENT and "two replicas" in bad.response.error.message
    h2 = Harness()
    h2.put_tasks(G, "p1", pool="gpu")
    c, _ = h2.join_new(G, metadata=pb.MemberMetadata(pool="cpu"))
    wrong_pool = h2.sync(G, c, 1, {c: ["p1"]})
    assert wrong_pool.code == pb.INVALID_ASSIGNMENT and "pool" in wrong_pool.response.error.message


def test_unplaceable_replicas_may_be_reported_unassigned_only_when_no_member_can_take_them() -> None:
    h = Harness()
    h.put_tasks(G, "p1", pool="gpu")
    c, _ = h.join_new(G)
    ok = h.sync(G, c, 1, {c: []}, unassigned=[pb.UnassignedReplica(task=pb.TaskReplica(task_id="p1"),
                                                                    reason="no member in pool gpu")])
    assert ok.code == pb.NONE
    assert [u.task.task_id for u in h.group(G).unassigned] == ["p1"]
    h2 = Harness()
    h2.put_tasks(G, "t1")
    d, _ = h2.join_new(G)
    lazy = h2.sync(G, d, 1, {d: []}, unassigned=[pb.UnassignedReplica(task=pb.TaskReplica(task_id="t1"),
                                                                       reason="lazy")])
    assert lazy.code == pb.INVALID_ASSIGNMENT


def test_assignor_error_is_reported_to_the_leader() -> None:
    h = Harness()
    h.put_tasks(G, "t1")
    a, _ = h.join_new(G)
    failed = h.sync(G, a, 1, assignor_error="replication factor 3 larger than 1 member")
    assert failed.code == pb.INVALID_ASSIGNMENT
    assert "replication factor 3" in h.group(G).last_error


def test_split_replaces_a_task_atomically_with_the_assignment() -> None:
    h = Harness()
    h.put_tasks(G, "big")
    a, _ = h.join_new(G)
    split = pb.TaskSplit(parent_task_id="big", children=[pb.Task(task_id="big-a"), pb.Task(task_id="big-b")])
    ok = h.sync(G, a, 1, {a: ["big-a", "big-b"]}, splits=[split])
    assert ok.code == pb.NONE
    assert sorted(h.group(G).tasks) == ["big-a", "big-b"]


def test_catalog_edits_trigger_a_rebalance_and_refuse_bad_input() -> None:
    h = Harness()
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    assert h.put_tasks(G, "t1") == pb.NONE
    assert h.state(G) == "PreparingRebalance"
    assert h.put_tasks(G, "x", "x") == pb.DUPLICATE_TASK
    assert h.put_tasks(G, "") == pb.INVALID_REQUEST
    assert h.put_tasks(G, "y", replicas=-1) == pb.INVALID_REQUEST
    assert "x" not in h.group(G).tasks
    deleted = h.admin("delete_tasks", pb.DeleteTasksRequest(group_id=G, task_ids=["t1", "nope"]))
    assert deleted.error.code == pb.UNKNOWN_TASK
    assert "t1" in h.group(G).tasks  # nothing deleted


def test_unchanged_catalog_does_not_rebalance() -> None:
    h = Harness()
    h.put_tasks(G, "t1")
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: ["t1"]})
    assert h.put_tasks(G, "t1") == pb.NONE
    assert h.state(G) == "Stable"


def test_delete_group_needs_it_empty() -> None:
    h = Harness()
    a, _ = h.join_new(G)
    assert h.admin("delete_group", pb.DeleteGroupRequest(group_id=G)).error.code == pb.NON_EMPTY_GROUP
    h.leave(G, a)
    assert h.admin("delete_group", pb.DeleteGroupRequest(group_id=G)).error.code == pb.NONE
    assert G not in h.model.groups


def test_standby_answers_not_coordinator_with_a_hint() -> None:
    h = Harness(office=FakeOffice(in_office=False, address="10.0.0.1:9400"))
    p = h.join(G)
    assert p.code == pb.NOT_COORDINATOR and p.response.error.coordinator_hint == "10.0.0.1:9400"


def test_restart_from_store_keeps_a_stable_group_stable() -> None:
    from groupcoord.coordinator.storage.store import MemoryStore

    store = MemoryStore()
    h = Harness(store=store)
    h.put_tasks(G, "t1", "t2")
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: ["t1", "t2"]})
    restarted = Harness(store=store)
    assert restarted.runtime.load() == 1
    restarted.check()
    assert restarted.state(G) == "Stable" and restarted.group(G).generation == 1
    assert restarted.heartbeat(G, a, 1) == pb.NONE
    assert [r.task_id for r in restarted.group(G).assignment[a]] == ["t1", "t2"]


def test_an_active_the_election_voted_out_stands_down_before_answering() -> None:
    office = FakeOffice()
    h = Harness(office=office)
    h.runtime.load()
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    assert h.heartbeat(G, a, 1) == pb.NONE
    _, held = h.join_new(G)  # a second member's join is held: the group is rebalancing
    assert not held.done
    office.is_in_office = False  # e.g. the process was paused past its ZooKeeper session: a standby may rule now
    assert h.heartbeat(G, a, 1) == pb.NOT_COORDINATOR
    assert held.code == pb.NOT_COORDINATOR  # unloaded: nothing is held any more
    assert not h.model.groups and len(h.runtime.timers) == 0


def test_a_failed_store_write_puts_the_group_back_as_stored_and_answers_held_requests() -> None:
    store = FailingStore(MemoryStore())
    h = Harness(store=store)
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    b, held_b = h.join_new(G)  # stored: PreparingRebalance at generation 1, b's join held
    store.fail_next_save()
    rejoin = h.join(G, a)  # a re-joins: the phase completes, but generation 2 cannot be written
    assert rejoin.code == pb.COORDINATOR_NOT_AVAILABLE and "disk is full" in rejoin.response.error.message
    assert held_b.code == pb.COORDINATOR_NOT_AVAILABLE  # answered, not left hanging
    h.check()
    assert h.state(G) == "PreparingRebalance" and h.group(G).generation == 1
    assert set(h.group(G).members) == {a, b}
    assert store.load_all()[G]["generation"] == 1  # memory and store agree
    # the fault has cleared: both retry and the phase completes
    join_a, join_b = h.join(G, a), h.join(G, b)
    assert join_a.code == join_b.code == pb.NONE and join_a.response.generation == 2


def test_a_group_never_stored_is_dropped_when_its_first_write_fails() -> None:
    store = FailingStore(MemoryStore())
    h = Harness(store=store)
    store.fail_next_save()
    assert h.put_tasks(G, "t1") == pb.COORDINATOR_NOT_AVAILABLE
    assert G not in h.model.groups and store.load_all() == {}
    assert h.put_tasks(G, "t1") == pb.NONE and h.group(G).tasks.keys() == {"t1"}
