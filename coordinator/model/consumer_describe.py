"""How ListGroups and DescribeGroup show a consumer-protocol group: as what it is.

A consumer group's catalog lives in the classic group of the same id, so the admin answers start
from that one (``coordinator.model.admin``) and this module overlays the consumer part: its type,
group and target epochs, a state in Kafka's consumer-group terms, and per member its epoch,
reconciliation state, target, what it is giving up and what it waits for others to release (for a
split's child, which parent and whose).

The state (``group_state``) reads every member: an admin question, asked by an operator, never
by a member's request. What goes into the answer is read on the loop as immutable sets; the
protobuf copies are made off the loop (``complete``), as the classic describe does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.consumer_group import ConsumerGroup
from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.coordinator.model.slices import extend_in_slices
from groupcoord.coordinator.model.split_lineage import held_ancestor
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CLASSIC", "CONSUMER", "group_state", "overlay_listing", "overlay_description"]

CLASSIC = "classic"
CONSUMER = "consumer"


def group_state(group: ConsumerGroup) -> pb.GroupState:
    """EMPTY; ASSIGNING (target behind the group epoch); RECONCILING (a member not yet at the target,
    or giving tasks up, or waiting for them); else STABLE. A static member away waits, it does not
    reconcile."""
    if not group.members:
        return pb.EMPTY
    if group.target_epoch < group.epoch:
        return pb.ASSIGNING
    for member in group.members.values():
        if not member.away and (member.reconciled.state is not MemberState.STABLE
                                or member.epoch < group.target_epoch):
            return pb.RECONCILING
    return pb.STABLE


def overlay_listing(listing: pb.GroupListing, group: ConsumerGroup) -> None:
    listing.group_type = CONSUMER
    listing.state = group_state(group)
    listing.generation = 0
    listing.num_members = len(group.members)
    listing.protocol = group.assignor
    listing.group_epoch = group.epoch
    listing.target_epoch = group.target_epoch


def _as_pb(tasks: Iterable[TaskReplica]) -> list[pb.TaskReplica]:
    return [pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in sorted(tasks)]


def overlay_description(response: pb.DescribeGroupResponse, group: ConsumerGroup, now: float) -> Callable[[], None]:
    """Fill the group's figures and its members now; returns what copies their task lists (off the loop)."""
    response.group_type = CONSUMER
    response.state = group_state(group)
    response.generation = 0
    response.protocol = group.assignor
    response.leader_id = group.leader_id if group.leader_id in group.members else ""  # a ``client:<name>`` group's
    response.group_epoch = group.epoch
    response.target_epoch = group.target_epoch
    if group.last_error:
        response.last_error = group.last_error
    del response.members[:]
    lists = []
    for member in group.members.values():
        reconciled, target = member.reconciled, group.target_of(member.member_id)
        response.members.append(pb.DescribedMember(
            member=pb.GroupMember(member_id=member.member_id, instance_id=member.instance_id,
                                  client_id=member.client_id, host=member.host, metadata=member.metadata),
            last_seen_ms_ago=int(max(0.0, now - member.last_seen) * 1000),
            consumer=pb.ConsumerMemberState(member_epoch=member.epoch, state=reconciled.state.value,
                                            away=member.away)))
        waiting = target - reconciled.assigned
        lists.append((reconciled.assigned, target, reconciled.revoking, waiting, split_waits(group, waiting)))

    def complete() -> None:
        for described, (assigned, target, revoking, waiting, waits) in zip(response.members, lists, strict=True):
            extend_in_slices(described.assigned, _as_pb(assigned))
            extend_in_slices(described.consumer.target, _as_pb(target))
            extend_in_slices(described.consumer.revoking, _as_pb(revoking))
            extend_in_slices(described.consumer.waiting, _as_pb(waiting))
            described.consumer.split_waits.extend(
                pb.SplitWait(child=pb.TaskReplica(task_id=child.task_id, replica=child.replica),
                             parent=pb.TaskReplica(task_id=parent.task_id, replica=parent.replica), held_by=held_by)
                for child, parent, held_by in waits)

    return complete


def split_waits(group: ConsumerGroup, waiting: Iterable[TaskReplica]) -> list[tuple[TaskReplica, TaskReplica, str]]:
    """Of ``waiting``, each split child whose parent (or older ancestor) a member still holds: the child,
    that ancestor and its holder. Read on the loop (the holders change); none without a recorded split."""
    if not group.split_from:
        return []
    found = []
    for child in sorted(waiting):
        held = held_ancestor(group.split_from, group.holder, child)
        if held is not None:
            found.append((child, *held))
    return found
