"""A static member's joins under the member id it made (Kafka's KIP-1082), on the coordinator's model: the
rows behind a static consumer worker restarted at once (SIGTERM, then its next process).

A join names the instance id and the member id the worker made before its first join, so the coordinator
may hold that member before the worker hears of it: a lost answer is retried under the same id, and a
worker closed before the answer leaves (-2) under it. Kafka's rules (``GroupMetadataManager``): an epoch-0
join whose instance is held by a live member is refused UNRELEASED_INSTANCE_ID, one whose member left with
-2 replaces it; a known member id is that member back, never another instance's (INVALID_REQUEST, as
apache/kafka#23542)."""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import G, heartbeat, tasks_of


def started() -> Harness:
    h = Harness(CoordinatorConfig())
    assert h.put_tasks(G, *(f"t{i}" for i in range(4))) == pb.NONE
    return h


def join(h: Harness, member_id: str, instance_id: str = "i-a") -> pb.GroupHeartbeatResponse:
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=member_id, member_epoch=0, session_timeout_ms=6_000,
                                       rebalance_timeout_ms=6_000, client_id="w")
    if instance_id:
        request.instance_id = instance_id
    return heartbeat(h, request).response


def leave(h: Harness, member_id: str, epoch: int = -2, instance_id: str = "i-a") -> pb.GroupHeartbeatResponse:
    return heartbeat(h, pb.GroupHeartbeatRequest(group_id=G, member_id=member_id, member_epoch=epoch,
                                                 instance_id=instance_id)).response


def settled(h: Harness, member_id: str, epoch: int) -> set[TaskReplica]:
    """Heartbeats, owning what each answer gives, until the member is told nothing new: what it runs."""
    owned: set[TaskReplica] = set()
    for _ in range(6):
        h.advance(0.2)
        request = pb.GroupHeartbeatRequest(group_id=G, member_id=member_id, member_epoch=epoch, instance_id="i-a")
        request.owned.SetInParent()
        request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in sorted(owned))
        response = heartbeat(h, request).response
        assert response.error.code == pb.NONE, response.error.message
        epoch = response.member_epoch
        if response.HasField("assignment"):
            owned = tasks_of(response)
    return owned


def test_a_first_join_retried_under_its_own_id_is_that_member_not_a_rival() -> None:
    h = started()
    first = join(h, "i-a-1")  # stepped; the worker never got this answer
    assert first.error.code == pb.NONE and first.member_id == "i-a-1"
    again = join(h, "i-a-1")
    assert again.error.code == pb.NONE and again.member_id == "i-a-1"
    assert list(h.model.consumer.groups[G].members) == ["i-a-1"]
    rival = join(h, "i-a-2")  # another process of the instance while the first is live: Kafka refuses it
    assert rival.error.code == pb.UNRELEASED_INSTANCE_ID and "i-a-1" in rival.error.message


def test_a_member_closed_before_its_join_was_answered_leaves_under_that_id_and_its_next_process_gets_in() -> None:
    h = started()
    join(h, "i-a-1")
    tasks = settled(h, "i-a-1", 1)
    assert len(tasks) == 4
    assert leave(h, "i-a-1").error.code == pb.NONE  # -2, named by the id the unanswered join carried
    back = join(h, "i-a-2")  # the next process, at once
    assert back.error.code == pb.NONE and back.member_id == "i-a-2" and tasks_of(back) == tasks
    assert list(h.model.consumer.groups[G].members) == ["i-a-2"]


def test_a_leave_for_a_join_never_stepped_changes_nothing() -> None:
    h = started()
    assert leave(h, "i-a-1").error.code == pb.UNKNOWN_MEMBER_ID  # the join never reached the coordinator
    assert join(h, "i-a-2").error.code == pb.NONE


def test_a_known_member_id_with_another_instance_id_is_refused_and_the_group_stays_whole() -> None:
    h = started()
    assert join(h, "b-1", instance_id="i-b").error.code == pb.NONE
    assert join(h, "a-1").error.code == pb.NONE
    assert leave(h, "a-1").error.code == pb.NONE  # i-a away
    for instance in ("i-a", "i-c"):  # b's id with another instance (one away, one unknown): not b back
        taken = join(h, "b-1", instance_id=instance)
        assert taken.error.code == pb.INVALID_REQUEST and "i-b" in taken.error.message
    group = h.model.consumer.groups[G]
    assert group.static_members == {"i-a": "a-1", "i-b": "b-1"} and group.members["b-1"].instance_id == "i-b"
    group.validate()
    assert join(h, "a-2").error.code == pb.NONE  # i-a's next process still replaces its away member
