"""JoinGroup: checks every state shares, then one handler per group state.

A new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394) and joins again
with it, so a retried first join leaves no ghost member. How a known member's join is
answered depends on the group's state (``KNOWN_MEMBER_JOIN``, documented in
``coordinator.states``).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Callable, Iterable

from coordinator import phases
from coordinator.effects import Outbox, Token, error
from coordinator.group import Group, Member
from coordinator.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

if TYPE_CHECKING:
    from coordinator.model import CoordinatorModel

__all__ = ["handle_join"]

log = logging.getLogger("groupcoord.coordinator")
S = GroupState


def handle_join(m: CoordinatorModel, out: Outbox, request: pb.JoinGroupRequest, token: Token, host: str) -> None:
    gid = request.group_id

    def fail(code: pb.ErrorCode, message: str = "", member_id: str = "") -> None:
        out.reply(token, gid, pb.JoinGroupResponse(error=error(code, message), member_id=member_id, generation=-1))

    failure = m.check_group_id(gid)
    if failure is not None:
        out.reply(token, "", pb.JoinGroupResponse(error=failure, generation=-1))
        return
    cfg = m.config
    if not cfg.group_min_session_timeout_ms <= request.session_timeout_ms <= cfg.group_max_session_timeout_ms:
        fail(
            pb.INVALID_SESSION_TIMEOUT,
            f"session_timeout_ms {request.session_timeout_ms} is outside "
            f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]",
        )
        return
    if request.rebalance_timeout_ms < 0:
        fail(pb.INVALID_REQUEST, "rebalance_timeout_ms must be >= 0")
        return
    protocols = tuple(request.protocols)
    if not protocols or any(not p for p in protocols) or len(set(protocols)) != len(protocols):
        fail(pb.INCONSISTENT_GROUP_PROTOCOL, "protocols must list at least one assignor name, without repeats")
        return
    metadata_size = request.metadata.ByteSize()
    if metadata_size > cfg.max_metadata_bytes:
        fail(pb.INVALID_REQUEST, f"metadata is {metadata_size} bytes; the limit is {cfg.max_metadata_bytes}")
        return
    group = m.groups.get(gid)
    if group is None:
        if request.member_id:
            fail(pb.UNKNOWN_MEMBER_ID, f"group {gid!r} does not exist (any more)")
            return
        group = m.new_group(gid)
    if group.state is S.DEAD:
        fail(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
    elif not request.member_id:
        _join_new_member(m, out, group, request, fail)
    elif request.member_id in group.pending_members:
        _join_pending_member(m, out, group, request, token, host)
    elif request.member_id not in group.members:
        fail(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group {gid!r}")
    else:
        member = group.members[request.member_id]
        if tuple(request.protocols) != member.protocols:  # only a change can break agreement (keeps it O(1))
            others = Group(gid, members={k: v for k, v in group.members.items() if k != member.member_id})
            if not others.supports_protocols(protocols):
                fail(pb.INCONSISTENT_GROUP_PROTOCOL, _protocol_mismatch(others, protocols))
                return
        member.last_seen = m.clock.now()
        KNOWN_MEMBER_JOIN[group.state](m, out, group, member, request, token)


def _protocol_mismatch(group: Group, offered: Iterable[str]) -> str:
    common = sorted(group.candidate_protocols())
    return f"member offers {sorted(offered)} but the group's members all support only {common}"


def _join_new_member(m: CoordinatorModel, out: Outbox, group: Group, request: pb.JoinGroupRequest,
                     fail: Callable[..., None]) -> None:
    if not group.supports_protocols(tuple(request.protocols)):
        fail(pb.INCONSISTENT_GROUP_PROTOCOL, _protocol_mismatch(group, request.protocols))
        return
    if group.size() >= m.config.group_max_size:
        fail(pb.GROUP_MAX_SIZE_REACHED, f"group {group.group_id!r} has {m.config.group_max_size} members")
        return
    member_id = f"{request.client_id or 'member'}-{uuid.uuid4()}"
    group.pending_members.add(member_id)
    out.arm(phases.pending_key(group.group_id, member_id), request.session_timeout_ms / 1000)
    fail(pb.MEMBER_ID_REQUIRED, "join again with the member id given", member_id)


def _join_pending_member(m: CoordinatorModel, out: Outbox, group: Group, request: pb.JoinGroupRequest,
                         token: Token, host: str) -> None:
    if not group.supports_protocols(tuple(request.protocols)):
        out.reply(token, group.group_id, pb.JoinGroupResponse(
            error=error(pb.INCONSISTENT_GROUP_PROTOCOL, _protocol_mismatch(group, request.protocols)), generation=-1))
        return
    group.pending_members.discard(request.member_id)
    out.cancel(phases.pending_key(group.group_id, request.member_id))
    member = Member(
        member_id=request.member_id,
        group_id=group.group_id,
        client_id=request.client_id,
        instance_id=request.instance_id,
        host=host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms or request.session_timeout_ms,
        protocols=tuple(request.protocols),
        metadata=request.metadata,
        join_token=token,
        last_seen=m.clock.now(),
    )
    group.members[member.member_id] = member
    phases.arm_session(out, group, member)
    log.info("group %s: member %s joined (%s)", group.group_id, member.member_id, host or "?")
    if group.state is S.PREPARING_REBALANCE:
        if group.in_initial_delay:
            group.new_member_during_delay = True
        phases.maybe_complete_join(m, out, group)
    else:
        phases.prepare_rebalance(m, out, group, f"member {member.member_id} joined")


def _update_member(member: Member, request: pb.JoinGroupRequest) -> None:
    member.protocols = tuple(request.protocols)
    member.metadata = request.metadata
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
    if request.instance_id:
        member.instance_id = request.instance_id


def _hold(out: Outbox, group: Group, member: Member, token: Token) -> None:
    if member.join_token is not None:
        out.fail(member.join_token, group.group_id, pb.JoinGroupResponse,
                 error(pb.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup of the same member"))
    member.join_token = token


# ---------------------------------------------------------------------- a known member, by state
# (m, out, group, member, request, token) -> None


def _known_in_empty(m: CoordinatorModel, out: Outbox, group: Group, member: Member,
                    request: pb.JoinGroupRequest, token: Token) -> None:
    out.reply(token, group.group_id, pb.JoinGroupResponse(
        error=error(pb.UNKNOWN_MEMBER_ID, f"member {member.member_id!r} is not in group {group.group_id!r}"),
        generation=-1))


def _known_in_preparing(m: CoordinatorModel, out: Outbox, group: Group, member: Member,
                        request: pb.JoinGroupRequest, token: Token) -> None:
    """Held until the phase completes; the newest join of a member wins."""
    _update_member(member, request)
    _hold(out, group, member, token)
    phases.maybe_complete_join(m, out, group)


def _known_in_awaiting_sync(m: CoordinatorModel, out: Outbox, group: Group, member: Member,
                            request: pb.JoinGroupRequest, token: Token) -> None:
    """Same metadata: the member lost our answer, send it again. Changed: rebalance."""
    if member.same_join(tuple(request.protocols), request.metadata):
        out.reply(token, group.group_id, phases.join_response(group, member))
        return
    _update_member(member, request)
    member.join_token = token
    phases.prepare_rebalance(m, out, group, f"member {member.member_id} re-joined with new metadata")


def _known_in_stable(m: CoordinatorModel, out: Outbox, group: Group, member: Member,
                     request: pb.JoinGroupRequest, token: Token) -> None:
    """A follower with unchanged metadata gets the current generation; the leader or a change rebalances."""
    if member.member_id != group.leader_id and member.same_join(tuple(request.protocols), request.metadata):
        out.reply(token, group.group_id, phases.join_response(group, member))
        return
    _update_member(member, request)
    member.join_token = token
    who = "leader" if member.member_id == group.leader_id else "member"
    phases.prepare_rebalance(m, out, group, f"{who} {member.member_id} re-joined")


def _known_in_dead(m: CoordinatorModel, out: Outbox, group: Group, member: Member,
                   request: pb.JoinGroupRequest, token: Token) -> None:
    out.reply(token, group.group_id, pb.JoinGroupResponse(
        error=error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed"), generation=-1))


KnownJoin = Callable[["CoordinatorModel", Outbox, Group, Member, pb.JoinGroupRequest, Token], None]
KNOWN_MEMBER_JOIN: dict[GroupState, KnownJoin] = {
    S.EMPTY: _known_in_empty,
    S.PREPARING_REBALANCE: _known_in_preparing,
    S.AWAITING_SYNC: _known_in_awaiting_sync,
    S.STABLE: _known_in_stable,
    S.DEAD: _known_in_dead,
}
