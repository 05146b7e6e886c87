"""What the coordinator tells a stream's members on its own (tag 0 news), decided from a group as it now is.

Pure: takes the group (classic part, consumer part), the members of it that streams carry and what
was told last, and returns the news to push; ``coordinator.rpc.session_registry`` asks after each
change of a group's record and pushes what comes back. News is a hint to act now rather than at the
next request: a member's own rules and the coordinator's fencing are the same with or without it.

* classic protocol: once per rebalance, ``RebalanceStarted`` to every member that is not already
  joining (its JoinGroup held), where it would otherwise learn it at its next heartbeat;
* consumer protocol: once per new target, ``TasksToGiveUp`` to a member holding tasks its target no
  longer has, else ``AssignmentChanged`` to a member whose assignment is behind it (a member the target
  does not touch takes the new epoch at its next heartbeat, as in Kafka: no call of its own);
* consumer protocol: ``AssignmentChanged`` to a member waiting for tasks of its target (UNRELEASED_TASKS)
  once some of them were let go, so it takes them now rather than at its next heartbeat (once per
  release: ``ConsumerGroup.unblocked`` empties as the member steps).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from groupcoord.coordinator.model.consumer_group import ConsumerGroup
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["classic_news", "consumer_news", "moved_news", "released_news"]


def classic_news(group: Group, members: Iterable[str]) -> list[str]:
    """Which of ``members`` of a rebalancing group to tell ``RebalanceStarted``: those not already joining
    (the news itself is the same for each but its member id: ``session_envelope.rebalance_started_frames``)."""
    if group.state is not GroupState.PREPARING_REBALANCE:
        return []
    known = group.members
    told = []
    for member_id in members:
        member = known.get(member_id)
        if member is not None and member.join_token is None:
            told.append(member_id)
    return told


def consumer_news(group: ConsumerGroup, members: Iterable[str]) -> list[pb.SessionNews]:
    """For a new target: each of ``members`` that must give tasks up, or whose assignment is behind it."""
    told = []
    for member_id in members:
        member = group.members.get(member_id)
        if member is None or member.away:
            continue
        target = group.target_of(member_id)
        now = member.reconciled
        if not now.revoking and (now.assigned is target or now.assigned == target):
            continue  # at its target already: nothing to give up, nothing behind (no set built)
        give_up = member.held - target
        if give_up:
            tasks = [pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in sorted(give_up)]
            told.append(pb.SessionNews(group_id=group.group_id, member_id=member_id, tasks_to_give_up=pb.TasksToGiveUp(
                member_epoch=member.epoch, tasks=tasks)))
        elif member.reconciled.assigned != target:
            told.append(_changed(group, member_id))
    return told


def released_news(group: ConsumerGroup, members: AbstractSet[str], told: AbstractSet[str]) -> list[pb.SessionNews]:
    """``AssignmentChanged`` for each of ``members`` (on streams) whose awaited tasks were let go, unless
    already ``told`` of it."""
    return [_changed(group, member_id) for member_id in sorted(group.unblocked & members - told)]


def _changed(group: ConsumerGroup, member_id: str) -> pb.SessionNews:
    return pb.SessionNews(group_id=group.group_id, member_id=member_id,
                          assignment_changed=pb.AssignmentChanged(member_epoch=group.target_epoch))


def moved_news(group_id: str, member_id: str, hint: str) -> pb.SessionNews:
    return pb.SessionNews(group_id=group_id, member_id=member_id,
                          coordinator_moved=pb.CoordinatorMoved(coordinator_hint=hint))
