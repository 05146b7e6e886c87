"""Classic-protocol members inside a consumer group (a converted group, ``coordinator.model.conversion``).

Their JoinGroup, SyncGroup, Heartbeat and LeaveGroup are answered from the consumer group's
target, as Kafka's ``classicGroupJoinToConsumerGroup`` and its siblings do, with no group-wide
barrier and no leader:

* **JoinGroup** reconciles the member toward its target (``coordinator.model.reconcile``), with
  what its metadata says it runs (``owned``) as its heartbeat's ``owned``: a claim only narrows
  what the coordinator counts it as holding. The answer's generation is the member's epoch, its
  leader nobody (every member just asks for its tasks), its rebalance protocol the member's own.
  A new member (no member id) is given one at once and joins as a consumer member does.
* **SyncGroup** answers the member's assignment: what it may run now. A cooperative member still
  giving tasks up (``UNREVOKED_TASKS``) is told to re-join at once (``rejoin``) once it stopped
  them, which releases them.
* **Heartbeat** renews the session; REBALANCE_IN_PROGRESS when a re-join would change the member
  (its target moved, tasks it waits for were released), so it re-joins.
* **LeaveGroup** removes the member; its tasks are free at once.

Sessions and rebalance timeouts are the consumer group's timers (``c-session``, ``c-revoke``).
"""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model import limits
from groupcoord.coordinator.model.consumer_group import ClassicTraits, ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_steps import ConsumerSteps
from groupcoord.coordinator.model.conversion import COOPERATIVE, EAGER
from groupcoord.coordinator.model.effects import Outbox, TimerKey, Token, error
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled, reconcile
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["classic_join", "classic_sync", "classic_heartbeat", "classic_leave"]

MAX_PROTOCOLS = 64  # as a classic JoinGroup (``coordinator.model.join``)


def _join_failure(cg: ConsumerSteps, request: pb.JoinGroupRequest) -> pb.Error | None:
    """The bounds a classic JoinGroup is held to, as ``coordinator.model.join`` checks them."""
    cfg = cg.m.config
    protocols = request.protocols
    if not cfg.group_min_session_timeout_ms <= request.session_timeout_ms <= cfg.group_max_session_timeout_ms:
        return error(pb.INVALID_SESSION_TIMEOUT, f"session_timeout_ms {request.session_timeout_ms} is outside "
                     f"[{cfg.group_min_session_timeout_ms}, {cfg.group_max_session_timeout_ms}]")
    if request.rebalance_timeout_ms < 0:
        return error(pb.INVALID_REQUEST, "rebalance_timeout_ms must be >= 0")
    if len(protocols) > MAX_PROTOCOLS or len(request.rebalance_protocols) > MAX_PROTOCOLS:
        return error(pb.INVALID_REQUEST, f"at most {MAX_PROTOCOLS} assignor names and {MAX_PROTOCOLS} "
                     "rebalance protocols")
    if not protocols or any(not p for p in protocols) or len(set(protocols)) != len(protocols):
        return error(pb.INCONSISTENT_GROUP_PROTOCOL, "protocols must list at least one assignor name, without repeats")
    if request.metadata.ByteSize() > cfg.max_metadata_bytes:
        return error(pb.INVALID_REQUEST, f"metadata is {request.metadata.ByteSize()} bytes; the limit is "
                     f"{cfg.max_metadata_bytes}")
    return (limits.check_id(cfg, "client_id", request.client_id)
            or limits.check_id(cfg, "instance_id", request.instance_id)
            or limits.check_id(cfg, "member_id", request.member_id, member_id=True)
            or limits.check_id(cfg, "protocol_type", request.protocol_type)
            or next(filter(None, (limits.check_id(cfg, "protocol name", p) for p in protocols)), None)
            or next(filter(None, (limits.check_id(cfg, "rebalance protocol", p)
                                  for p in request.rebalance_protocols)), None))


def _named(group: ConsumerGroup, member_id: str, instance_id: str) -> tuple[ConsumerMember | None, pb.Error | None]:
    """The classic member a request names (by instance id first, as Kafka's validateCurrentMember)."""
    if instance_id:
        current = group.static_members.get(instance_id)
        if current is None:
            return None, error(pb.UNKNOWN_MEMBER_ID, f"instance {instance_id!r} is not in group {group.group_id!r}")
        if current != member_id:
            return None, error(pb.FENCED_INSTANCE_ID, f"instance {instance_id!r} is member {current} now; "
                               f"{member_id!r} is fenced")
    member = group.members.get(member_id)
    if member is None:
        return None, error(pb.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}")
    if member.classic is None:
        return None, error(pb.INCONSISTENT_GROUP_PROTOCOL, f"member {member_id!r} speaks the consumer protocol "
                           "(GroupHeartbeat)")
    return member, None


def _renew(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup, member: ConsumerMember) -> None:
    member.lost_mark = cg.m.lateness()
    out.arm(TimerKey("c-session", group.group_id, member.member_id), member.session_timeout_ms / 1000)


def _reconcile(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup, member: ConsumerMember,
               owned: frozenset[TaskReplica] | None) -> None:
    """Walk the member toward its target, as a consumer member's heartbeat does (``ConsumerGroups._renewed``)."""
    before = member.reconciled
    after = reconcile(before, group.target_epoch, group.target_of(member.member_id), owned,
                      group.held_elsewhere(member.member_id))
    if after == before:
        return
    group.hold(member, after)
    revoke_key = TimerKey("c-revoke", group.group_id, member.member_id)
    if after.state is MemberState.UNREVOKED_TASKS and after.revoking != before.revoking:
        out.arm(revoke_key, member.rebalance_timeout_ms / 1000)
    elif before.state is MemberState.UNREVOKED_TASKS and after.state is not MemberState.UNREVOKED_TASKS:
        out.cancel(revoke_key)
    cg._persist(out, group)


def _traits(request: pb.JoinGroupRequest) -> ClassicTraits:
    return ClassicTraits(tuple(request.protocols), request.protocol_type, tuple(request.rebalance_protocols))


def _join_answer(member: ConsumerMember) -> pb.JoinGroupResponse:
    traits = member.classic
    assert traits is not None
    return pb.JoinGroupResponse(
        error=error(pb.NONE), generation=member.epoch, protocol=traits.protocols[0],
        protocol_type=traits.protocol_type, leader_id="", member_id=member.member_id,
        rebalance_protocol=COOPERATIVE if COOPERATIVE in traits.rebalance_protocols else EAGER)


def classic_join(cg: ConsumerSteps, out: Outbox, request: pb.JoinGroupRequest, token: Token, host: str,
                 principal: str) -> None:
    group = cg.groups[request.group_id]
    failure = _join_failure(cg, request)
    member: ConsumerMember | None = None
    if failure is None and request.member_id:
        member, failure = _named(group, request.member_id, request.instance_id)
    elif failure is None:
        member, failure = _new_member(cg, out, group, request, host, principal)
    if failure is not None or member is None:
        out.fail(token, group.group_id, pb.JoinGroupResponse, failure or error(pb.UNKNOWN_MEMBER_ID, ""))
        return
    traits = _traits(request)
    changed = request.metadata.rack != member.metadata.rack or request.metadata.pool != member.metadata.pool or (
        request.metadata.capacity != member.metadata.capacity
        or request.metadata.attributes != member.metadata.attributes)
    if traits != member.classic or changed or request.session_timeout_ms != member.session_timeout_ms or (
            request.rebalance_timeout_ms != member.rebalance_timeout_ms):
        member.classic, member.metadata, member.info = traits, request.metadata, None
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms or member.rebalance_timeout_ms
        group.refresh(member)
        if changed:
            cg._changed(out, group)
        else:
            cg._persist(out, group)
    _renew(cg, out, group, member)
    owned = frozenset(TaskReplica(t.task_id, t.replica) for t in request.metadata.owned)
    _reconcile(cg, out, group, member, owned)
    out.reply(token, group.group_id, _join_answer(member))


def _new_member(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup, request: pb.JoinGroupRequest, host: str,
                principal: str) -> tuple[ConsumerMember | None, pb.Error | None]:
    """A classic member joining a converted group: a static one replacing its instance's old member
    (it takes what that one held, as KIP-345's replacement does), or a new one, given an id at once."""
    instance_id = request.instance_id
    old = group.members.get(group.static_members.get(instance_id, "")) if instance_id else None
    if old is not None and old.classic is None:
        return None, error(pb.UNRELEASED_INSTANCE_ID, f"instance {instance_id!r} is held by consumer-protocol "
                           f"member {old.member_id}")
    if old is None and len(group.members) >= cg.m.config.group_max_size:
        return None, error(pb.GROUP_MAX_SIZE_REACHED, f"group {group.group_id!r} has {len(group.members)} members "
                           "(group_max_size)")
    member = ConsumerMember(
        member_id=cg._new_member_id(instance_id or request.client_id or "member"), instance_id=instance_id,
        client_id=request.client_id, host=host, principal=principal, metadata=request.metadata,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms or cg.settings.rebalance_timeout_ms,
        classic=_traits(request))
    if old is not None:
        held = old.reconciled
        group.remove(old)
        out.cancel(TimerKey("c-session", group.group_id, old.member_id))
        out.cancel(TimerKey("c-revoke", group.group_id, old.member_id))
        member.reconciled = Reconciled(MemberState.STABLE, held.epoch, frozenset())
        group.add(member)
        group.hold(member, held)
        if held.state is MemberState.UNREVOKED_TASKS:
            out.arm(TimerKey("c-revoke", group.group_id, member.member_id), member.rebalance_timeout_ms / 1000)
        if old.member_id in group.target:
            group.target[member.member_id] = group.target.pop(old.member_id)
        cg._persist(out, group)
        return member, None
    member.reconciled = Reconciled(MemberState.STABLE, group.target_epoch, frozenset())
    group.add(member)
    cg._changed(out, group)
    return member, None


def classic_sync(cg: ConsumerSteps, out: Outbox, request: pb.SyncGroupRequest, token: Token) -> None:
    group = cg.groups[request.group_id]
    member, failure = _named(group, request.member_id, request.instance_id)
    if failure is None and member is not None and request.generation != member.epoch:
        failure = error(pb.ILLEGAL_GENERATION, f"generation {request.generation} is not member "
                        f"{member.member_id}'s ({member.epoch})")
    if failure is not None or member is None or member.classic is None:
        out.fail(token, group.group_id, pb.SyncGroupResponse, failure or error(pb.UNKNOWN_MEMBER_ID, ""))
        return
    _renew(cg, out, group, member)
    assigned = member.reconciled.assigned
    member.sent = assigned
    out.reply(token, group.group_id, pb.SyncGroupResponse(
        error=error(pb.NONE), generation=member.epoch, protocol=member.classic.protocols[0],
        tasks=[pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in sorted(assigned)],
        rejoin=member.reconciled.state is MemberState.UNREVOKED_TASKS))


def classic_heartbeat(cg: ConsumerSteps, out: Outbox, request: pb.HeartbeatRequest, token: Token) -> None:
    group = cg.groups[request.group_id]
    member, failure = _named(group, request.member_id, request.instance_id)
    if failure is None and member is not None and request.generation != member.epoch:
        failure = error(pb.ILLEGAL_GENERATION, f"generation {request.generation} is not member "
                        f"{member.member_id}'s ({member.epoch})")
    if failure is not None or member is None:
        out.reply(token, group.group_id, pb.HeartbeatResponse(error=failure))
        return
    _renew(cg, out, group, member)
    before = member.reconciled
    would = reconcile(before, group.target_epoch, group.target_of(member.member_id), None,
                      group.held_elsewhere(member.member_id))
    if would != before:
        out.reply(token, group.group_id, pb.HeartbeatResponse(error=error(
            pb.REBALANCE_IN_PROGRESS, f"group {group.group_id!r} has a new target (epoch {group.target_epoch}): "
            "re-join")))
        return
    out.reply(token, group.group_id, pb.HeartbeatResponse(error=error(pb.NONE)))


def classic_leave(cg: ConsumerSteps, out: Outbox, request: pb.LeaveGroupRequest, token: Token) -> None:
    """One member or a batch, each answered on its own (an operator may name any member by instance id)."""
    gid = request.group_id
    batch = list(request.members)
    if batch and (request.member_id or request.instance_id):
        out.reply(token, "", pb.LeaveGroupResponse(error=error(
            pb.INVALID_REQUEST, "give either member_id/instance_id or a batch of members, not both")))
        return
    most = limits.leave_batch_limit(cg.m.config)
    leaving = batch or [pb.MemberIdentity(member_id=request.member_id, instance_id=request.instance_id)]
    if len(leaving) > most:
        out.reply(token, "", pb.LeaveGroupResponse(error=error(
            pb.INVALID_REQUEST, f"{len(leaving)} members; at most {most} in one LeaveGroup")))
        return
    answers = []
    for who in leaving:
        answer = pb.MemberLeaveResponse(member_id=who.member_id, instance_id=who.instance_id)
        group = cg.groups.get(gid)
        member_id = who.member_id or (group.static_members.get(who.instance_id, "") if group is not None else "")
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            answer.error.CopyFrom(error(pb.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {gid!r}"))
        elif who.member_id and who.instance_id and group.static_members.get(who.instance_id) != who.member_id:
            answer.error.CopyFrom(error(pb.FENCED_INSTANCE_ID, f"instance {who.instance_id!r} is another member now"))
        else:
            answer.member_id = member_id
            cg._remove(out, group, member, "left (LeaveGroup)")
            answer.error.CopyFrom(error(pb.NONE))
        answers.append(answer)
    response = pb.LeaveGroupResponse(members=answers)
    if not batch:
        response.error.CopyFrom(answers[0].error)
    out.reply(token, gid, response)
