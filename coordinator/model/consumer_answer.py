"""The consumer protocol's settings and the answer to a member's heartbeat."""

from __future__ import annotations

from dataclasses import dataclass

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.consumer_group import ConsumerMember
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ConsumerSettings", "answer"]


@dataclass(frozen=True, kw_only=True)
class ConsumerSettings:
    heartbeat_interval_ms: int = 5_000
    """How often members heartbeat; every answer says so (Kafka's group.consumer.heartbeat.interval.ms) (ms)."""
    session_timeout_ms: int = 45_000
    """A member's session when its join does not say (Kafka's group.consumer.session.timeout.ms) (ms)."""
    rebalance_timeout_ms: int = 300_000
    """How long a member may take to give tasks up when its join does not say (ms)."""
    assignment_interval_ms: int = 100
    """A group's target is computed at most once per this interval: changes meanwhile are batched (ms)."""
    default_assignor: str = "sticky"
    """The server-side assignor of a group whose members name none."""


def answer(member: ConsumerMember, interval_ms: int, received: int,
            owned: frozenset[TaskReplica] | None) -> pb.GroupHeartbeatResponse:
    """The answer to a member's heartbeat; its assignment only when the member may not have it:
    changed since last sent, an epoch older than the answer that last carried it (that answer may be
    lost), or what it says it runs is not what it was given. A new epoch alone carries none (as
    Kafka's): 10,000 members taking a target epoch that leaves their tasks alone are sent no list."""
    response = pb.GroupHeartbeatResponse(member_id=member.member_id, heartbeat_interval_ms=interval_ms,
                                         member_epoch=member.epoch)
    assigned, sent = member.reconciled.assigned, member.sent
    if assigned is not sent and assigned == sent:  # the same tasks as another set object (the target's, taken
        member.sent = sent = assigned  # with a new epoch): kept, so that the next heartbeats compare identities
    if (assigned is not sent or received < member.sent_epoch or received == 0
            or (owned is not None and owned != assigned)):
        member.sent, member.sent_epoch = assigned, member.epoch
        response.assignment.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                         for t in sorted(assigned))
        member.sent_wire = (response.assignment.SerializeToString(), assigned)
    return response
