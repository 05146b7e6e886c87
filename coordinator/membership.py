"""Heartbeat, LeaveGroup and ReportLoad: the requests that keep a member alive, let it go,
or carry its load figures.

A heartbeat renews the member's session in every state that has members; only Stable answers
NONE, the rebalancing states answer REBALANCE_IN_PROGRESS (after the member and generation
checks), which sends the worker back to JoinGroup.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from coordinator import phases
from coordinator.effects import Outbox, Token, error
from coordinator.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

if TYPE_CHECKING:
    from coordinator.model import CoordinatorModel

__all__ = ["handle_heartbeat", "handle_leave", "handle_report_load", "HEARTBEAT_ANSWER"]

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


def handle_heartbeat(m: CoordinatorModel, out: Outbox, request: pb.HeartbeatRequest, token: Token) -> None:
    group, member, failure = m.find_member(request.group_id, request.member_id, request.generation)
    if failure is not None:
        out.reply(token, request.group_id if group else "", pb.HeartbeatResponse(error=failure))
        return
    assert group is not None and member is not None
    member.last_seen = m.clock.now()
    phases.arm_session(out, group, member)
    out.reply(token, group.group_id, HEARTBEAT_ANSWER[group.state])


def handle_leave(m: CoordinatorModel, out: Outbox, request: pb.LeaveGroupRequest, token: Token) -> None:
    gid = request.group_id
    group = m.groups.get(gid)
    if group is not None and request.member_id in group.pending_members:
        group.pending_members.discard(request.member_id)
        out.cancel(phases.pending_key(gid, request.member_id))
        phases.maybe_complete_join(m, out, group)
        out.reply(token, gid, pb.LeaveGroupResponse())
        return
    group, member, failure = m.find_member(gid, request.member_id, None)
    if failure is not None:
        out.reply(token, gid if group else "", pb.LeaveGroupResponse(error=failure))
        return
    assert group is not None and member is not None
    log.info("group %s: member %s left", gid, member.member_id)
    phases.fail_held(out, group, member, pb.UNKNOWN_MEMBER_ID, "the member left the group")
    phases.drop_member(out, group, member)
    phases.after_member_removed(m, out, group, f"member {member.member_id} left")
    out.reply(token, gid, pb.LeaveGroupResponse())


def handle_report_load(m: CoordinatorModel, out: Outbox, request: pb.ReportLoadRequest, token: Token) -> None:
    group, member, failure = m.find_member(request.group_id, request.member_id, None)
    if failure is not None:
        out.reply(token, "", pb.ReportLoadResponse(error=failure))
        return
    assert member is not None
    if not request.HasField("report"):
        out.reply(token, "", pb.ReportLoadResponse(error=error(pb.INVALID_REQUEST, "report is missing")))
        return
    member.last_seen = m.clock.now()
    out.record_load(request.group_id, request.member_id, request.report)
    out.reply(token, "", pb.ReportLoadResponse())
