"""JoinGroup: checks every state shares, then one handler per group state.

A new dynamic member first gets MEMBER_ID_REQUIRED with its id (KIP-394) and joins again
with it, so a retried first join leaves no ghost member; its parked join expires after the
new-member join timeout. A static member (an instance id, KIP-345) joins in one step; when
its instance is known it replaces its old member id, which is fenced. Only members count
toward the max group size, never pending ids (Kafka's acceptJoiningMember). How a known
member's join is answered depends on the group's state (``KNOWN_MEMBER_JOIN``, documented in
``coordinator.model.states``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import limits, phases, quotas
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import Outbox, Token, error
from groupcoord.coordinator.model.group import Group, Member, entry_bytes
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["handle_join"]

log = logging.getLogger("groupcoord.coordinator")
S = GroupState
_UUID_SUFFIX = 37  # "-" and a uuid4: what a new member's id adds to its name
MAX_PROTOCOLS = 64  # assignor names a member may offer (a real one offers a handful)


def handle_join(m: Model, out: Outbox, request: pb.JoinGroupRequest, token: Token, host: str,
                principal: str = "") -> None:
    """``principal``: who sent it (``coordinator.auth``); a new member belongs to it from now on."""
    gid = request.group_id

    def fail(code: pb.ErrorCode, message: str = "", member_id: str = "") -> None:
        out.reply(token, gid, pb.JoinGroupResponse(error=error(code, message), member_id=member_id, generation=-1))

    failure = m.check_group_id(gid)
    if failure is not None:
        out.reply(token, "", pb.JoinGroupResponse(error=failure, generation=-1))
        return
    cfg = m.config
    protocols = tuple(request.protocols)
    metadata_size = request.metadata.ByteSize()
    refused = _request_refusal(cfg, request, protocols, metadata_size)
    if refused is not None:
        fail(*refused)
        return
    failure = _id_failure(cfg, request, protocols)
    if failure is not None:
        out.reply(token, "", pb.JoinGroupResponse(error=failure, generation=-1))
        return
    group = m.groups.get(gid)
    if group is None:
        if request.member_id:
            fail(pb.UNKNOWN_MEMBER_ID, f"group {gid!r} does not exist (any more)")
            return
        account = m.account_of(gid, principal) if principal else ""
        failure = quotas.group_creation(m, account)
        if failure is not None:
            out.reply(token, "", pb.JoinGroupResponse(error=failure, generation=-1))
            return
        group = m.new_group(gid, account, principal)
    if group.state is S.DEAD:
        fail(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
    elif not _accepts(m, group, request):
        _refuse_over_max_size(m, out, group, request.member_id)
        fail(pb.GROUP_MAX_SIZE_REACHED, f"group {gid!r} has {m.config.group_max_size} members")
    elif (failure := _over_metadata_bound(m, group, request, metadata_size, host)) is not None:
        out.reply(token, gid, pb.JoinGroupResponse(error=failure, member_id=request.member_id, generation=-1))
    elif not request.member_id:
        _join_new_member(m, out, group, request, token, host, fail, principal)
    elif request.member_id in group.pending_members:
        if group.pending_members.owner(request.member_id) != _asker(principal, host):
            fail(pb.UNKNOWN_MEMBER_ID, "the member id was handed out to another client")
        elif request.instance_id:
            fail(pb.INVALID_REQUEST, "a member id handed out with MEMBER_ID_REQUIRED cannot become static")
        elif not group.supports_protocols(request.protocol_type, protocols):
            fail(pb.INCONSISTENT_GROUP_PROTOCOL, _protocol_mismatch(group, request))
        else:
            group.pending_members.discard(request.member_id)
            out.cancel(phases.pending_key(gid, request.member_id))
            _add_member(m, out, group, request, request.member_id, token, host, principal)
    else:
        failure = m.check_member(group, request.member_id, request.instance_id)
        if failure is not None:
            out.reply(token, gid, pb.JoinGroupResponse(error=failure, member_id=request.member_id, generation=-1))
            return
        member = group.members[request.member_id]
        changed = protocols != member.protocols or request.protocol_type != group.protocol_type
        if changed and not group.supports_protocols(request.protocol_type, protocols, excluding=member):
            fail(pb.INCONSISTENT_GROUP_PROTOCOL, _protocol_mismatch(group, request, excluding=member))
            return
        member.last_seen = m.clock.now()
        KNOWN_MEMBER_JOIN[group.state](m, out, group, member, request, token)


def _request_refusal(cfg: CoordinatorConfig, request: pb.JoinGroupRequest, protocols: tuple[str, ...],
                     metadata_size: int) -> tuple[pb.ErrorCode, str] | None:
    """The request's own numbers and lists out of bounds, in Kafka's order: session timeout, rebalance
    timeout, the protocol lists, the metadata's size; None when they hold."""
    if not cfg.group_min_session_timeout_ms <= request.session_timeout_ms <= cfg.group_max_session_timeout_ms:
        bounds = f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]"
        return pb.INVALID_SESSION_TIMEOUT, f"session_timeout_ms {request.session_timeout_ms} is outside {bounds}"
    if request.rebalance_timeout_ms < 0:
        return pb.INVALID_REQUEST, "rebalance_timeout_ms must be >= 0"
    if len(protocols) > MAX_PROTOCOLS or len(request.rebalance_protocols) > MAX_PROTOCOLS:
        return pb.INVALID_REQUEST, f"at most {MAX_PROTOCOLS} assignor names and {MAX_PROTOCOLS} rebalance protocols"
    if not protocols or any(not p for p in protocols) or len(set(protocols)) != len(protocols):
        return pb.INCONSISTENT_GROUP_PROTOCOL, "protocols must list at least one assignor name, without repeats"
    if metadata_size > cfg.max_metadata_bytes:
        return pb.INVALID_REQUEST, f"metadata is {metadata_size} bytes; the limit is {cfg.max_metadata_bytes}"
    return None


def _id_failure(cfg: CoordinatorConfig, request: pb.JoinGroupRequest, protocols: tuple[str, ...]) -> pb.Error | None:
    """The first of the request's ids that is too long or not printable (``limits.check_id``), in this
    order; None when all hold. Every join asks: one pass over all of them answers the common case,
    and only a request that fails it is checked id by id, for the error to name the first bad one."""
    limit, member_id = cfg.max_id_length, request.member_id
    texts = (request.client_id, request.instance_id, request.protocol_type, *protocols, *request.rebalance_protocols)
    if (len(member_id) <= limit + _UUID_SUFFIX and max(map(len, texts)) <= limit
            and "".join(texts).isprintable() and member_id.isprintable()):
        return None
    return (limits.check_id(cfg, "client_id", request.client_id)
            or limits.check_id(cfg, "instance_id", request.instance_id)
            or limits.check_id(cfg, "member_id", member_id, member_id=True)
            or limits.check_id(cfg, "protocol_type", request.protocol_type)
            or next(filter(None, (limits.check_id(cfg, "protocol name", p) for p in protocols)), None)
            or next(filter(None, (limits.check_id(cfg, "rebalance protocol", p)
                                  for p in request.rebalance_protocols)), None))


def _accepts(m: Model, group: Group, request: pb.JoinGroupRequest) -> bool:
    """Kafka's acceptJoiningMember: only members count toward the max size, never pending ids.
    While preparing, the members that re-joined count (so a lowered limit drops the last ones
    to re-join); otherwise all members do. A known static instance replaces itself."""
    limit = m.config.group_max_size
    member = group.members.get(request.member_id)
    if group.state in (S.EMPTY, S.DEAD) or (not request.member_id and request.instance_id in group.static_members):
        return True
    if len(group.members) < limit:  # (implies the count below)
        return True
    if group.state is S.PREPARING_REBALANCE:
        return (member is not None and member.join_token is not None) or group.awaiting_join < limit
    return member is not None


def _over_metadata_bound(m: Model, group: Group, request: pb.JoinGroupRequest, metadata_size: int,
                         host: str) -> pb.Error | None:
    """GROUP_MAX_SIZE_REACHED if this join would take the members' metadata past what the leader's
    JoinGroup answer may carry (``limits.group_metadata_limit``); O(1): the group keeps the total.
    A join that adds nothing (same or smaller metadata) always passes: no member is pushed out."""
    member = group.members.get(request.member_id)
    if member is None and request.instance_id in group.static_members:
        member = group.members.get(group.static_members[request.instance_id])
    before = member.entry_bytes if member is not None else 0
    name = request.member_id or request.instance_id or request.client_id or "member"
    after = entry_bytes(metadata_size + (0 if request.member_id else _UUID_SUFFIX), name, request.instance_id,
                        request.client_id, host)
    total, limit = group.metadata_bytes - before + after, limits.group_metadata_limit(m.config)
    if after <= before or total <= limit:
        return None
    log.info("group %s: a join refused: the members' metadata would take %d bytes, at most %d", group.group_id,
             total, limit, extra={"event": "member_refused", "group": group.group_id,
                                   "reason": "group metadata bound"})
    return error(pb.GROUP_MAX_SIZE_REACHED, f"group {limits.quoted(group.group_id)}: with this member's "
                 f"{metadata_size} bytes of metadata its members' would take {total} bytes of the leader's "
                 f"JoinGroup answer; at most {limit} (group_max_metadata_bytes, at most half of max_message_bytes)")


def _refuse_over_max_size(m: Model, out: Outbox, group: Group, member_id: str) -> None:
    if member_id in group.pending_members:
        group.pending_members.discard(member_id)
        out.cancel(phases.pending_key(group.group_id, member_id))
    elif member_id in group.members:  # a member that had not re-joined when the group filled up
        log.info("group %s: %s refused: the group is full", group.group_id, member_id, extra={
            "event": "member_refused", "group": group.group_id, "member": member_id, "reason": "group is full"})
        phases.drop_member(out, group, group.members[member_id])
        phases.maybe_complete_join(m, out, group)


def _protocol_mismatch(group: Group, request: pb.JoinGroupRequest, excluding: Member | None = None) -> str:
    if len(group.members) > (excluding is not None) and request.protocol_type != group.protocol_type:
        return (f"member's protocol type {limits.quoted(request.protocol_type)} is not the group's "
                f"{limits.quoted(group.protocol_type)}")
    common = sorted(group.candidate_protocols(excluding=excluding))
    return (f"member offers {limits.listed(sorted(request.protocols))} but the group's members all support only "
            f"{limits.listed(common)}")


def _join_new_member(m: Model, out: Outbox, group: Group, request: pb.JoinGroupRequest,
                     token: Token, host: str, fail: Callable[..., None], principal: str) -> None:
    if not group.supports_protocols(request.protocol_type, tuple(request.protocols)):
        fail(pb.INCONSISTENT_GROUP_PROTOCOL, _protocol_mismatch(group, request))
        return
    member_id = m.new_member_id(request.instance_id or request.client_id or 'member')
    if request.instance_id in group.static_members:
        _replace_static_member(m, out, group, request, member_id, token, principal)
    elif request.instance_id:  # a static member needs no second step: its instance id names it
        _add_member(m, out, group, request, member_id, token, host, principal)
    else:
        _hand_out_member_id(m, out, group, request, member_id, _asker(principal, host), fail)


def _hand_out_member_id(m: Model, out: Outbox, group: Group, request: pb.JoinGroupRequest, member_id: str,
                        asker: str, fail: Callable[..., None]) -> None:
    """MEMBER_ID_REQUIRED with a new id that lives ``limits.pending_id_lifetime_s``. An asker at its
    share gives up its own oldest id for it, and a group at its cap its oldest id of all
    (``coordinator.model.pending``): a flood pushes out the flooder's ids first, and a real client
    gets its id at once, whoever floods (it loses it only if a whole cap of first joins comes
    between its two joins; it then joins again from the start, as after UNKNOWN_MEMBER_ID)."""
    cfg, pending = m.config, group.pending_members
    if pending.held_by(asker) >= cfg.group_max_pending_members_per_principal:
        _give_up(out, group, pending.oldest_of(asker))
    elif len(pending) >= cfg.group_max_pending_members:
        _give_up(out, group, pending.oldest())
    pending.add(member_id, asker)
    out.arm(phases.pending_key(group.group_id, member_id), limits.pending_id_lifetime_s(cfg, request.session_timeout_ms))
    fail(pb.MEMBER_ID_REQUIRED, "join again with the member id given", member_id)


def _give_up(out: Outbox, group: Group, member_id: str | None) -> None:
    if member_id is not None:
        group.pending_members.discard(member_id)
        out.cancel(phases.pending_key(group.group_id, member_id))


def _asker(principal: str, host: str) -> str:
    """Who a pending id belongs to: the authenticated principal, else the client's address."""
    return principal or f"address {host or '?'}"


def _add_member(m: Model, out: Outbox, group: Group, request: pb.JoinGroupRequest, member_id: str,
                token: Token, host: str, principal: str) -> None:
    member = Member(
        member_id=member_id,
        group_id=group.group_id,
        client_id=request.client_id,
        instance_id=request.instance_id,
        host=host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms or request.session_timeout_ms,
        protocols=tuple(request.protocols),
        metadata=request.metadata,
        protocol_type=request.protocol_type,
        rebalance_protocols=tuple(request.rebalance_protocols),
        last_seen=m.clock.now(),
        is_new=True,
        principal=principal,
    )
    group.add(member)
    group.hold_join(member, token)
    # KIP-394: a new member cannot heartbeat while parked; if it goes away, its join expires
    out.arm(phases.session_key(group.group_id, member_id), m.config.group_new_member_join_timeout_ms / 1000)
    log.info("group %s: member %s joined (client %s, host %s%s)", group.group_id, member_id, member.client_id,
             host or "?", f", instance {member.instance_id}" if member.instance_id else "", extra={
                 "event": "member_joined", "group": group.group_id, "member": member_id, "client": member.client_id,
                 "instance": member.instance_id, "host": host})
    if group.state is S.PREPARING_REBALANCE:
        if group.in_initial_delay:
            group.new_member_during_delay = True
        phases.maybe_complete_join(m, out, group)
    else:
        phases.prepare_rebalance(m, out, group, f"member {member_id} joined")


def _replace_static_member(m: Model, out: Outbox, group: Group, request: pb.JoinGroupRequest,
                           member_id: str, token: Token, principal: str) -> None:
    """A known instance came back (a restarted process): it takes a new member id, its old one is
    fenced, and in a Stable group with unchanged settings it gets its tasks back without a
    rebalance. A static leader stays leader and is told to skip the assignment (KIP-814)."""
    old_member_id, member = group.replace_static(request.instance_id, member_id)
    member.principal = member.principal or principal  # the instance stays its owner's (the guard checked)
    phases.fail_held(out, group, member, pb.FENCED_INSTANCE_ID,
                     f"instance {request.instance_id!r} re-joined as {member_id}")
    out.cancel(phases.session_key(group.group_id, old_member_id))
    unchanged = member.same_settings(tuple(request.protocols), request.metadata)
    _update_member(group, member, request)
    member.last_seen = m.clock.now()
    phases.arm_session(m, out, group, member)
    log.info("group %s: static member %s re-joined as %s (was %s)", group.group_id, request.instance_id,
             member_id, old_member_id, extra={"event": "member_rejoined", "group": group.group_id, "member": member_id,
                                              "instance": request.instance_id, "previous_member": old_member_id})
    # unchanged settings in Stable: every member offers what it offered when the generation's
    # protocol was voted, so the vote stands (no O(members) re-vote per static restart)
    if group.state is S.STABLE and unchanged:
        out.persist(group)  # the new member id is durable before the member hears of it
        phases.reply_join(out, token, group, member, skip_assignment=member.member_id == group.leader_id)
        return
    group.hold_join(member, token)
    if group.state is S.PREPARING_REBALANCE:
        phases.maybe_complete_join(m, out, group)
    else:
        phases.prepare_rebalance(m, out, group, f"static member {request.instance_id} re-joined "
                                 f"{'during a rebalance' if unchanged else 'with new settings'}")


def _update_member(group: Group, member: Member, request: pb.JoinGroupRequest) -> None:
    group.set_protocols(member, tuple(request.protocols))
    member.rebalance_protocols = tuple(request.rebalance_protocols)
    group.set_metadata(member, request.metadata)
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
    if request.instance_id:
        member.instance_id = request.instance_id


def _hold(out: Outbox, group: Group, member: Member, token: Token) -> None:
    previous = group.hold_join(member, token)
    if previous is not None:
        out.fail(previous, group.group_id, pb.JoinGroupResponse,
                 error(pb.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup of the same member"))


# ---------------------------------------------------------------------- a known member, by state
# (m, out, group, member, request, token) -> None


def _known_in_empty(m: Model, out: Outbox, group: Group, member: Member,
                    request: pb.JoinGroupRequest, token: Token) -> None:
    out.reply(token, group.group_id, pb.JoinGroupResponse(
        error=error(pb.UNKNOWN_MEMBER_ID, f"member {member.member_id!r} is not in group {group.group_id!r}"),
        generation=-1))


def _known_in_preparing(m: Model, out: Outbox, group: Group, member: Member,
                        request: pb.JoinGroupRequest, token: Token) -> None:
    """Held until the phase completes; the newest join of a member wins."""
    _update_member(group, member, request)
    _hold(out, group, member, token)
    phases.maybe_complete_join(m, out, group)


def _known_in_awaiting_sync(m: Model, out: Outbox, group: Group, member: Member,
                            request: pb.JoinGroupRequest, token: Token) -> None:
    """Same metadata: the member lost our answer, send it again. Changed: rebalance."""
    if member.same_join(tuple(request.protocols), request.metadata):
        phases.arm_session(m, out, group, member)
        phases.reply_join(out, token, group, member)
        return
    _update_member(group, member, request)
    _hold(out, group, member, token)
    phases.prepare_rebalance(m, out, group, f"member {member.member_id} re-joined with new metadata")


def _known_in_stable(m: Model, out: Outbox, group: Group, member: Member,
                     request: pb.JoinGroupRequest, token: Token) -> None:
    """A follower with unchanged metadata gets the current generation; the leader or a change rebalances,
    and so does anyone while tasks wait between two cooperative generations (they were told to re-join)."""
    if (member.member_id != group.leader_id and not group.revoking
            and member.same_join(tuple(request.protocols), request.metadata)):
        phases.arm_session(m, out, group, member)
        phases.reply_join(out, token, group, member)
        return
    _update_member(group, member, request)
    _hold(out, group, member, token)
    who = "leader" if member.member_id == group.leader_id else "member"
    phases.prepare_rebalance(m, out, group, f"{who} {member.member_id} re-joined")


def _known_in_dead(m: Model, out: Outbox, group: Group, member: Member,
                   request: pb.JoinGroupRequest, token: Token) -> None:
    out.reply(token, group.group_id, pb.JoinGroupResponse(
        error=error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed"), generation=-1))


KnownJoin = Callable[[Model, Outbox, Group, Member, pb.JoinGroupRequest, Token], None]
KNOWN_MEMBER_JOIN: dict[GroupState, KnownJoin] = {
    S.EMPTY: _known_in_empty,
    S.PREPARING_REBALANCE: _known_in_preparing,
    S.AWAITING_SYNC: _known_in_awaiting_sync,
    S.STABLE: _known_in_stable,
    S.DEAD: _known_in_dead,
}
