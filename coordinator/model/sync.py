"""SyncGroup: the member and generation checks, then one handler per group state.

In AwaitingSync followers are held until the leader's SyncGroup brings the assignment, which
is validated (``coordinator.model.validation``) before anyone hears of it: a bad one answers the
leader INVALID_ASSIGNMENT with the reason, records it as the group's ``last_error`` and
rebalances.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.coordinator.model import limits, phases
from groupcoord.coordinator.model.assignment_check import AssignmentCheck, check_assignment, inputs_of
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import Outbox, Token, error
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["handle_sync"]

log = logging.getLogger("groupcoord.coordinator")
S = GroupState


def handle_sync(m: Model, out: Outbox, request: pb.SyncGroupRequest, token: Token,
                checked: AssignmentCheck | None = None) -> None:
    group, member, failure = m.find_member(request.group_id, request.member_id, request.generation,
                                           request.instance_id)
    if failure is None and group is not None:
        failure = _protocol_check(group, request)
    if failure is not None:
        out.reply(token, request.group_id if group else "", pb.SyncGroupResponse(error=failure, generation=-1))
        return
    assert group is not None and member is not None
    member.last_seen = m.clock.now()
    SYNC[group.state](m, out, group, member, request, token, checked)


def _protocol_check(group: Group, request: pb.SyncGroupRequest) -> pb.Error | None:
    """KIP-559: a protocol type or name given in SyncGroup must be the group's, once it has one (as
    Kafka's: a group converted back from the consumer protocol has chosen none until it rebalances)."""
    if request.protocol_type and group.protocol_type and request.protocol_type != group.protocol_type:
        return error(pb.INCONSISTENT_GROUP_PROTOCOL,
                     f"protocol type {limits.quoted(request.protocol_type)} is not the group's "
                     f"{limits.quoted(group.protocol_type)}")
    if request.protocol_name and group.protocol and request.protocol_name != group.protocol:
        return error(pb.INCONSISTENT_GROUP_PROTOCOL,
                     f"protocol {limits.quoted(request.protocol_name)} is not this generation's "
                     f"{limits.quoted(group.protocol)}")
    return None


def _in_preparing(m: Model, out: Outbox, group: Group, member: Member,
                  request: pb.SyncGroupRequest, token: Token, checked: AssignmentCheck | None) -> None:
    out.fail(token, group.group_id, pb.SyncGroupResponse, error(pb.REBALANCE_IN_PROGRESS,
                                                                "the group is rebalancing: join again"))


def _in_stable(m: Model, out: Outbox, group: Group, member: Member,
               request: pb.SyncGroupRequest, token: Token, checked: AssignmentCheck | None) -> None:
    """A late or repeated SyncGroup gets the stored assignment (and no longer owes its sync)."""
    group.pending_sync.discard(member.member_id)
    phases.arm_session(m, out, group, member)
    out.reply(token, group.group_id, phases.sync_response(group, member.member_id))


def _in_awaiting_sync(m: Model, out: Outbox, group: Group, member: Member,
                      request: pb.SyncGroupRequest, token: Token, checked: AssignmentCheck | None) -> None:
    if member.sync_token is not None:
        out.fail(member.sync_token, group.group_id, pb.SyncGroupResponse, error(pb.REBALANCE_IN_PROGRESS,
                                                                                "superseded"))
    member.sync_token = token
    group.pending_sync.discard(member.member_id)
    phases.arm_session(m, out, group, member)
    if member.member_id == group.leader_id:
        with m.bulk():  # the assignment checked, kept and handed to every member
            _accept_leader_sync(m, out, group, request, checked)


def _in_other(m: Model, out: Outbox, group: Group, member: Member,
              request: pb.SyncGroupRequest, token: Token, checked: AssignmentCheck | None) -> None:
    out.fail(token, group.group_id, pb.SyncGroupResponse,
             error(pb.UNKNOWN_MEMBER_ID, f"member {member.member_id!r} is not in group {group.group_id!r}"))


def _accept_leader_sync(m: Model, out: Outbox, group: Group, request: pb.SyncGroupRequest,
                        checked: AssignmentCheck | None) -> None:
    """``checked``: the verdict the service reached on a thread; used if the group is still as it was."""
    cooperative = group.rebalance_protocol == RebalanceProtocol.COOPERATIVE
    if checked is None or not checked.fits(group):
        checked = check_assignment(m.config, inputs_of(group, cooperative), request)
    if checked.rejected:
        reason = checked.rejected
        log.warning("group %s: generation %d: invalid assignment: %s", group.group_id, group.generation, reason,
                    extra={"event": "assignment_refused", "group": group.group_id, "generation": group.generation,
                           "reason": reason})
        group.last_error = f"generation {group.generation}: {reason}"
        leader = group.members[group.leader_id]
        token, leader.sync_token = leader.sync_token, None
        phases.prepare_rebalance(m, out, group, f"invalid assignment from the leader: {reason}")
        phases.arm_session(m, out, group, leader)
        out.fail(token, group.group_id, pb.SyncGroupResponse, error(pb.INVALID_ASSIGNMENT, reason))
        return
    tasks, revoking = checked.tasks, checked.revoking
    if request.splits:
        group.tasks = tasks
        group.catalog_version += 1
    group.assignment = checked.assignment
    group.user_data = {a.member_id: a.user_data for a in request.assignments if a.user_data}
    for member_id in group.members:
        group.assignment.setdefault(member_id, [])
    group.unassigned = list(request.unassigned)
    group.revoking = revoking
    group.last_error = ""
    # the sync timer keeps running: members that never send SyncGroup are removed at its end
    group.complete_sync()
    out.persist(group)  # durable before tasks start
    log.info(
        "group %s: generation %d stable: %d replica(s) over %d member(s), %d unassigned, assignor %s",
        group.group_id, group.generation, sum(len(v) for v in group.assignment.values()),
        len(group.members), len(group.unassigned), group.protocol,
        extra={"event": "rebalance_completed", "group": group.group_id, "generation": group.generation,
               "members": len(group.members), "unassigned": len(group.unassigned), "assignor": group.protocol},
    )
    for member in group.members.values():
        if member.sync_token is not None:
            token, member.sync_token = member.sync_token, None
            phases.arm_session(m, out, group, member)  # answered: a follower that waited long keeps its session
            response = checked.responses.get(member.member_id) or phases.sync_response(group, member.member_id)
            group.synced.add(member.member_id)
            out.reply(token, group.group_id, response)


SyncHandler = Callable[[Model, Outbox, Group, Member, pb.SyncGroupRequest, Token, AssignmentCheck | None], None]
SYNC: dict[GroupState, SyncHandler] = {
    S.EMPTY: _in_other,
    S.PREPARING_REBALANCE: _in_preparing,
    S.AWAITING_SYNC: _in_awaiting_sync,
    S.STABLE: _in_stable,
    S.DEAD: _in_other,
}
