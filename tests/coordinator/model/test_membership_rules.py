"""Kafka's classic-protocol membership rules on a fake clock (issue: Kafka-exact group membership).

Each test names the Kafka rule it checks; each failed against the coordinator before the rule
was built.
"""

from __future__ import annotations

import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import Harness, Pending
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"


def harness_with(store: MemoryStore) -> Harness:
    return Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000), store=store)


def harness(**config: int) -> Harness:
    """A coordinator whose new groups wait 1 s for their members (so a pair forms one generation)."""
    return Harness(CoordinatorConfig(**{"group_initial_rebalance_delay_ms": 1000, **config}))


def form_pair(h: Harness, **join: object) -> tuple[str, str]:
    """Leader a and follower b joined (generation 1, AwaitingSync); nobody has synced yet."""
    a, ja = h.join_new(G, **join)  # type: ignore[arg-type]
    b, jb = h.join_new(G, **join)  # type: ignore[arg-type]
    h.advance(2.5)  # the initial delay, extended once for the second member
    assert h.state(G) == "AwaitingSync" and ja.done and jb.done
    assert ja.response.generation == 1 and ja.response.leader_id == a
    return a, b


# ---------------------------------------------------------------------- opaque bytes


def test_the_leaders_user_data_reaches_each_member_unchanged() -> None:
    store = MemoryStore()
    h = harness_with(store)
    h.put_tasks(G, "t1", "t2")
    a, b = form_pair(h)
    follower = h.sync(G, b, 1)
    request = pb.SyncGroupRequest(group_id=G, member_id=a, generation=1, assignments=[
        pb.MemberAssignment(member_id=a, tasks=[pb.TaskReplica(task_id="t1")], user_data=b"leader=a;v=7"),
        pb.MemberAssignment(member_id=b, tasks=[pb.TaskReplica(task_id="t2")], user_data=b"\x00\xffraw"),
    ])
    leader = h.run(lambda token: h.model.sync(request, token), pb.SyncGroupResponse)
    assert leader.response.user_data == b"leader=a;v=7"
    assert follower.response.user_data == b"\x00\xffraw"
    assert h.sync(G, b, 1).response.user_data == b"\x00\xffraw"  # a late SyncGroup too
    restarted = harness_with(store)
    restarted.runtime.load()
    assert restarted.sync(G, b, 1).response.user_data == b"\x00\xffraw"  # and after a restart


def test_member_metadata_user_data_reaches_the_leader() -> None:
    h = harness()
    _a, ja = h.join_new(G, metadata=pb.MemberMetadata(user_data=b"\x01sub"))
    h.advance(1.1)
    assert [m.metadata.user_data for m in ja.response.members] == [b"\x01sub"]


# ---------------------------------------------------------------------- sessions


def test_answering_a_parked_sync_restarts_the_members_session() -> None:
    """Kafka's propagateAssignment: a follower parked in SyncGroup longer than its session is not
    expelled right after it gets its assignment."""
    h = harness()
    h.put_tasks(G, "t1")
    a, b = form_pair(h, session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    parked = h.sync(G, b, 1)  # b waits for the slow leader
    h.advance(9.0)
    assert h.heartbeat(G, a, 1) == pb.REBALANCE_IN_PROGRESS  # the leader is alive, still assigning
    assert h.sync(G, a, 1, {a: ["t1"], b: []}).code == pb.NONE
    assert parked.code == pb.NONE
    h.advance(5.0)  # 14 s after b's SyncGroup: its session restarted at the answer, 9 s ago... 5 s ago
    assert b in h.group(G).members and h.state(G) == "Stable"
    assert h.heartbeat(G, b, 1) == pb.NONE


def test_answering_held_syncs_with_rebalance_in_progress_restarts_sessions() -> None:
    h = harness()
    a, b = form_pair(h, session_timeout_ms=10_000, rebalance_timeout_ms=60_000)
    parked = h.sync(G, b, 1)
    h.advance(9.0)
    h.heartbeat(G, a, 1)
    assert h.put_tasks(G, "new") == pb.NONE  # the catalog changes: the group rebalances
    assert parked.code == pb.REBALANCE_IN_PROGRESS
    h.advance(5.0)
    assert b in h.group(G).members  # b's session restarted when it was answered


def test_a_member_that_never_syncs_is_removed_even_once_the_group_is_stable() -> None:
    """KAFKA-12890: the pending-sync timer outlives the leader's SyncGroup."""
    h = harness()
    h.put_tasks(G, "t1")
    a, b = form_pair(h, session_timeout_ms=60_000, rebalance_timeout_ms=30_000)
    assert h.sync(G, a, 1, {a: ["t1"], b: []}).code == pb.NONE
    assert h.state(G) == "Stable"
    h.advance(20.0)
    assert h.heartbeat(G, a, 1) == pb.NONE
    h.advance(10.1)  # the rebalance timeout after the join phase: b never sent SyncGroup
    assert b not in h.group(G).members
    assert h.state(G) == "PreparingRebalance"


def test_a_late_sync_in_stable_clears_the_members_debt() -> None:
    h = harness()
    h.put_tasks(G, "t1")
    a, b = form_pair(h, session_timeout_ms=60_000, rebalance_timeout_ms=30_000)
    h.sync(G, a, 1, {a: ["t1"], b: []})
    h.advance(20.0)
    assert h.sync(G, b, 1).code == pb.NONE  # late, but in time
    h.advance(10.1)
    assert set(h.group(G).members) == {a, b} and h.state(G) == "Stable"


# ---------------------------------------------------------------------- group size


def test_pending_member_ids_do_not_count_toward_the_max_group_size() -> None:
    """A fleet of 5 starting together against a limit of 3: every first join gets its member id;
    three become members and the other two are refused at the second step."""
    h = Harness(CoordinatorConfig(group_max_size=3, group_initial_rebalance_delay_ms=1000))
    firsts = [h.join(G) for _ in range(5)]
    assert [p.code for p in firsts] == [pb.MEMBER_ID_REQUIRED] * 5
    seconds = [h.join(G, p.response.member_id) for p in firsts]
    refused = [p for p in seconds if p.done and p.code == pb.GROUP_MAX_SIZE_REACHED]
    assert len(refused) == 2 and len(h.group(G).members) == 3
    assert not h.group(G).pending_members  # the refused ids are forgotten
    h.advance(5.0)
    assert [p.code for p in seconds if p not in refused] == [pb.NONE] * 3


def test_a_full_stable_group_refuses_a_new_member_at_the_first_step() -> None:
    h = Harness(CoordinatorConfig(group_max_size=1, group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    assert h.join(G).code == pb.GROUP_MAX_SIZE_REACHED


# ---------------------------------------------------------------------- protocol type


def test_a_member_of_another_protocol_type_is_refused() -> None:
    h = harness()
    h.join_new(G, protocol_type="consumer")
    assert h.join(G, protocol_type="connect").code == pb.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(G, protocol_type="consumer").code == pb.MEMBER_ID_REQUIRED


def test_sync_checks_protocol_type_and_name_when_given() -> None:
    """KIP-559."""
    h = harness()
    a, ja = h.join_new(G, protocol_type="consumer", protocols=("sticky", "round-robin"))
    h.advance(1.1)
    assert ja.response.protocol_type == "consumer" and ja.response.protocol == "sticky"
    assert h.sync(G, a, 1, protocol_type="connect").code == pb.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync(G, a, 1, protocol_name="round-robin").code == pb.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync(G, a, 1, {a: []}, protocol_type="consumer", protocol_name="sticky").code == pb.NONE


# ---------------------------------------------------------------------- new-member join timeout


def test_a_new_member_parked_in_join_expires_after_the_new_member_timeout() -> None:
    """KIP-394: a new member that goes away while parked does not stay until the rebalance ends."""
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_new_member_join_timeout_ms=5_000))
    a, _ = h.join_new(G, rebalance_timeout_ms=60_000)
    h.sync(G, a, 1, {a: []})
    b, parked = h.join_new(G, rebalance_timeout_ms=60_000)  # a rebalance starts; a has not re-joined
    for _ in range(5):
        h.advance(1.0)
        h.heartbeat(G, a, 1)  # a lives on, but does not re-join yet
    h.advance(0.1)
    assert parked.code == pb.UNKNOWN_MEMBER_ID
    assert b not in h.group(G).members and h.state(G) == "PreparingRebalance"


# ---------------------------------------------------------------------- LeaveGroup in batches


def test_leave_group_takes_a_batch_with_one_error_per_member() -> None:
    """KIP-345: operators remove several members (by member id or instance id) in one request."""
    h = harness()
    a, _ = h.join_new(G)
    b_join = h.join(G, instance_id="inst-b")
    c_join = h.join(G, instance_id="inst-c")
    h.advance(5.0)
    assert b_join.code == c_join.code == pb.NONE  # static members join in one step
    response = h.leave_batch(G, (a, ""), ("", "inst-c"), ("ghost", ""), ("", "inst-zz"))
    assert response.error.code == pb.NONE
    assert [(m.member_id, pb.ErrorCode.Name(m.error.code)) for m in response.members] == [
        (a, "NONE"), (c_join.response.member_id, "NONE"), ("ghost", "UNKNOWN_MEMBER_ID"), ("", "UNKNOWN_MEMBER_ID"),
    ]
    assert set(h.group(G).members) == {b_join.response.member_id}
    assert h.state(G) == "PreparingRebalance"  # one rebalance for the whole batch
    assert next(e for e in h.effects if type(e).__name__ == "Persist").record["generation"] == 1


def test_leave_of_a_single_unknown_member_still_reports_at_the_top() -> None:
    h = harness()
    h.join_new(G)
    assert h.leave(G, "ghost") == pb.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------------- static membership


def static_pair(h: Harness) -> tuple[Pending, Pending]:
    h.put_tasks(G, "t1", "t2")
    ja = h.join(G, instance_id="a", session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    jb = h.join(G, instance_id="b", session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    h.advance(2.5)
    a, b = ja.response.member_id, jb.response.member_id
    assert ja.response.generation == 1 and ja.response.leader_id == a
    h.sync(G, b, 1)
    h.sync(G, a, 1, {a: ["t1"], b: ["t2"]})
    assert h.state(G) == "Stable"
    return ja, jb


def test_a_static_member_that_restarts_keeps_its_tasks_without_a_rebalance() -> None:
    h = harness()
    _ja, jb = static_pair(h)
    old_b = jb.response.member_id
    again = h.join(G, instance_id="b", session_timeout_ms=30_000)  # b restarted: no member id
    assert again.code == pb.NONE
    new_b = again.response.member_id
    assert new_b != old_b and new_b.startswith("b-")
    assert again.response.generation == 1 and not again.response.skip_assignment
    assert h.state(G) == "Stable" and h.group(G).generation == 1
    assert h.sync(G, new_b, 1).response.tasks[0].task_id == "t2"
    # the old process is fenced wherever it shows up with its instance id
    assert h.heartbeat(G, old_b, 1, instance_id="b") == pb.FENCED_INSTANCE_ID
    assert h.sync(G, old_b, 1, instance_id="b").code == pb.FENCED_INSTANCE_ID
    assert h.join(G, old_b, instance_id="b").code == pb.FENCED_INSTANCE_ID
    assert h.leave(G, old_b, instance_id="b") == pb.FENCED_INSTANCE_ID
    assert h.heartbeat(G, old_b, 1) == pb.UNKNOWN_MEMBER_ID  # without it, the id is simply gone
    assert h.heartbeat(G, new_b, 1, instance_id="b") == pb.NONE


def test_a_static_leader_that_restarts_keeps_leadership_and_skips_assignment() -> None:
    """KIP-814."""
    h = harness()
    _ja, _ = static_pair(h)
    again = h.join(G, instance_id="a", session_timeout_ms=30_000)
    new_a = again.response.member_id
    assert again.code == pb.NONE and again.response.skip_assignment
    assert again.response.leader_id == new_a == h.group(G).leader_id
    assert len(again.response.members) == 2  # the leader still sees the group
    assert h.state(G) == "Stable" and h.group(G).generation == 1
    assert [t.task_id for t in h.sync(G, new_a, 1).response.tasks] == ["t1"]


def test_a_static_member_back_with_new_settings_rebalances() -> None:
    h = harness()
    static_pair(h)
    again = h.join(G, instance_id="b", session_timeout_ms=30_000, metadata=pb.MemberMetadata(rack="r2"))
    assert not again.done and h.state(G) == "PreparingRebalance"


def test_a_restarted_static_member_reporting_what_it_owns_is_still_unchanged() -> None:
    h = harness()
    static_pair(h)
    again = h.join(G, instance_id="b", session_timeout_ms=30_000,
                   metadata=pb.MemberMetadata(owned=[pb.TaskReplica(task_id="t2")], owned_generation=1))
    assert again.code == pb.NONE and h.state(G) == "Stable"


def test_a_static_member_replaced_while_parked_has_its_old_join_fenced() -> None:
    h = harness()
    _ja, jb = static_pair(h)
    old_b = jb.response.member_id
    h.put_tasks(G, "t3")  # rebalance
    parked = h.join(G, old_b, instance_id="b", session_timeout_ms=30_000)
    assert not parked.done
    h.join(G, instance_id="b", session_timeout_ms=30_000)  # a second process claims instance b
    assert parked.code == pb.FENCED_INSTANCE_ID


def test_static_members_that_miss_a_rebalance_stay_until_their_session_expires() -> None:
    h = harness()
    ja, jb = static_pair(h)
    a, b = ja.response.member_id, jb.response.member_id
    h.put_tasks(G, "t3")  # rebalance; b is down and does not re-join
    h.join(G, a, instance_id="a", session_timeout_ms=30_000, rebalance_timeout_ms=10_000)
    h.advance(10.1)  # the rebalance timeout: b is static, so it stays a member
    assert b in h.group(G).members and h.state(G) == "AwaitingSync"
    assert h.group(G).generation == 2
    h.heartbeat(G, a, 2)
    h.advance(20.0)  # 30 s of silence: b's session is over
    assert b not in h.group(G).members


def test_a_static_member_joins_in_one_step_and_instance_ids_stay_unique() -> None:
    h = harness(group_initial_rebalance_delay_ms=0)
    first = h.join(G, instance_id="x")
    assert first.code == pb.NONE  # no MEMBER_ID_REQUIRED round trip
    second = h.join(G, instance_id="x")  # another process with the same instance id takes it over
    assert second.code == pb.NONE
    assert list(h.group(G).static_members) == ["x"] and len(h.group(G).members) == 1


def test_static_members_survive_a_coordinator_restart() -> None:
    store = MemoryStore()
    h = harness_with(store)
    _, jb = static_pair(h)
    restarted = harness_with(store)
    restarted.runtime.load()
    assert restarted.group(G).static_members["b"] == jb.response.member_id
    again = restarted.join(G, instance_id="b", session_timeout_ms=30_000)
    assert again.code == pb.NONE and restarted.state(G) == "Stable"


@pytest.mark.parametrize("field", ["join", "sync", "heartbeat", "leave"])
def test_an_unknown_instance_id_is_an_unknown_member(field: str) -> None:
    h = harness()
    ja, _ = static_pair(h)
    a = ja.response.member_id
    code = {
        "join": lambda: h.join(G, a, instance_id="nope").code,
        "sync": lambda: h.sync(G, a, 1, instance_id="nope").code,
        "heartbeat": lambda: h.heartbeat(G, a, 1, instance_id="nope"),
        "leave": lambda: h.leave(G, a, instance_id="nope"),
    }[field]()
    assert code == pb.UNKNOWN_MEMBER_ID


def test_pending_ids_do_not_fill_a_stable_group() -> None:
    h = harness(group_max_size=2, group_initial_rebalance_delay_ms=0)
    a, _ = h.join_new(G)
    h.sync(G, a, 1, {a: []})
    assert [h.join(G).code for _ in range(3)] == [pb.MEMBER_ID_REQUIRED] * 3  # one slot, three candidates
