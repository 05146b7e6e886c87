"""Heartbeat, LeaveGroup and ReportLoad: the requests that keep a member alive, let it go,
or carry its load figures.

A heartbeat renews the member's session in every state that has members; only Stable answers
NONE, the rebalancing states answer REBALANCE_IN_PROGRESS (after the member and generation
checks), which sends the worker back to JoinGroup.
"""

from __future__ import annotations

import logging

from groupcoord.coordinator.model import limits, phases
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import ArmTimer, Outbox, Token, error
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.prechecks import Verdict, report_error
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["quick_heartbeat", "handle_heartbeat", "handle_leave", "handle_report_load", "HEARTBEAT_ANSWER"]

log = logging.getLogger("groupcoord.coordinator")
S = GroupState
_OK = pb.HeartbeatResponse()
_REBALANCING = pb.HeartbeatResponse(error=error(pb.REBALANCE_IN_PROGRESS, "the group is rebalancing: join again"))

# What a heartbeat of a current member gets in each state that has members.
HEARTBEAT_ANSWER: dict[GroupState, pb.HeartbeatResponse] = {
    S.PREPARING_REBALANCE: _REBALANCING,
    S.AWAITING_SYNC: _REBALANCING,
    S.STABLE: _OK,
}


def quick_heartbeat(m: Model, request: pb.HeartbeatRequest) -> tuple[ArmTimer, pb.HeartbeatResponse] | None:
    """The heartbeat of a current member of a Stable group, nearly every heartbeat there is: its
    session renewed, answered NONE at once. Returns the session timer to arm and the answer, or None
    for every other case, which ``handle_heartbeat`` answers. It does what that handler does in this case,
    without an ``Outbox`` or a reply to route: the hot path's cost is in its calls and objects."""
    group = m.groups.get(request.group_id)
    if group is None or group.state is not S.STABLE or request.generation != group.generation:
        return None
    member = group.members.get(request.member_id)
    instance_id = request.instance_id
    if member is None or (instance_id and group.static_members.get(instance_id) != member.member_id):
        return None
    member.last_seen = m.clock.now()
    return ArmTimer(*phases.renew_session(m, group, member)), _OK


def handle_heartbeat(m: Model, out: Outbox, request: pb.HeartbeatRequest, token: Token) -> None:
    group, member, failure = m.find_member(request.group_id, request.member_id, request.generation,
                                           request.instance_id)
    if failure is not None:
        out.reply(token, request.group_id if group else "", pb.HeartbeatResponse(error=failure))
        return
    assert group is not None and member is not None
    member.last_seen = m.clock.now()
    phases.arm_session(m, out, group, member)
    out.reply(token, group.group_id, HEARTBEAT_ANSWER[group.state])


def handle_leave(m: Model, out: Outbox, request: pb.LeaveGroupRequest, token: Token) -> None:
    """One member leaving, or a batch (KIP-345): each gets its own error; the group rebalances once.
    A member given by instance id alone is an operator removing a static member."""
    gid = request.group_id
    batch = list(request.members)
    leaving = batch or [pb.MemberIdentity(member_id=request.member_id, instance_id=request.instance_id)]
    failure = m.check_group_id(gid)
    group = m.groups.get(gid) if failure is None else None
    if group is not None and group.state is S.DEAD:
        failure = error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
    if failure is not None:
        out.reply(token, "", pb.LeaveGroupResponse(error=failure))
        return
    if batch and (request.member_id or request.instance_id):
        out.reply(token, "", pb.LeaveGroupResponse(error=error(
            pb.INVALID_REQUEST, "give either member_id/instance_id or a batch of members, not both")))
        return
    most = limits.leave_batch_limit(m.config)
    if len(leaving) > most:  # refused before acting: the answer to every entry must fit in one message
        out.reply(token, "", pb.LeaveGroupResponse(error=error(
            pb.INVALID_REQUEST, f"{len(leaving)} members; at most {most} in one LeaveGroup (every member and "
            f"pending id once, and what one answer of max_message_bytes can carry)")))
        return
    answers = [_leave_one(m, out, group, who) for who in leaving]
    response = pb.LeaveGroupResponse(members=answers)
    if not batch:  # a single member's error is the request's, as before batches existed
        response.error.CopyFrom(answers[0].error)
    out.reply(token, gid if group is not None else "", response)


def _leave_one(m: Model, out: Outbox, group: Group | None, who: pb.MemberIdentity) -> pb.MemberLeaveResponse:
    failure = (limits.check_id(m.config, "member_id", who.member_id, member_id=True)
               or limits.check_id(m.config, "instance_id", who.instance_id))
    if failure is not None:  # not echoed back: it may be the megabyte that broke the limit
        return pb.MemberLeaveResponse(error=failure)
    answer = pb.MemberLeaveResponse(member_id=who.member_id, instance_id=who.instance_id)
    if group is None:
        answer.error.CopyFrom(error(pb.UNKNOWN_MEMBER_ID, "the group does not exist"))
        return answer
    member_id = who.member_id
    if not member_id and who.instance_id:  # removal by instance id (an operator)
        member_id = group.static_members.get(who.instance_id, "")
        if not member_id:
            answer.error.CopyFrom(error(pb.UNKNOWN_MEMBER_ID, f"instance {who.instance_id!r} is not in the group"))
            return answer
        answer.member_id = member_id
    elif member_id in group.pending_members:
        group.pending_members.discard(member_id)
        out.cancel(phases.pending_key(group.group_id, member_id))
        phases.maybe_complete_join(m, out, group)
        answer.error.CopyFrom(error(pb.NONE))
        return answer
    else:
        failure = m.check_member(group, member_id, who.instance_id)
        if failure is not None:
            answer.error.CopyFrom(failure)
            return answer
    member = group.members[member_id]
    reason = "removed by instance id (an operator's LeaveGroup)" if not who.member_id else "left (LeaveGroup)"
    log.info("group %s: member %s %s", group.group_id, member_id, reason, extra={
        "event": "member_left", "group": group.group_id, "member": member_id, "instance": member.instance_id,
        "reason": reason})
    phases.fail_held(out, group, member, pb.UNKNOWN_MEMBER_ID, "the member left the group")
    phases.drop_member(out, group, member)
    phases.after_member_removed(m, out, group, f"member {member_id} left")
    answer.error.CopyFrom(error(pb.NONE))
    return answer


def handle_report_load(m: Model, out: Outbox, request: pb.ReportLoadRequest, token: Token,
                       checked: Verdict | None = None) -> None:
    """``checked``: the report checks' verdict, when the service ran them on a thread."""
    _group, member, failure = m.find_member(request.group_id, request.member_id, None)
    if failure is not None:
        out.reply(token, "", pb.ReportLoadResponse(error=failure))
        return
    assert member is not None
    failure = checked.failure if checked is not None else report_error(m.config, request)
    if failure is not None:
        out.reply(token, "", pb.ReportLoadResponse(error=failure))
        return
    member.last_seen = m.clock.now()
    out.record_load(request.group_id, request.member_id, request.report)
    out.reply(token, "", pb.ReportLoadResponse())
