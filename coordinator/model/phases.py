"""The rebalance phases every handler shares: prepare, complete the join, complete the sync,
member liveness and removal. Functions take the model, the step's outbox and a group; they
change the group through its state machine's triggers and put what must happen in the outbox.

The answers the phases give and their timers' keys are ``coordinator.model.answers``'s.
"""

from __future__ import annotations

import logging

from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.coordinator.model import limits
from groupcoord.coordinator.model.answers import (  # moved there; still exported from here
    add_catalog,
    expire_key,
    fail_held,
    join_answer,
    join_key,
    pending_key,
    reply_join,
    session_key,
    sync_key,
    sync_response,
)
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import Outbox, TimerKey, error
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.coordinator.model.ownership import Owners, by_member, record_of, running
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "join_key",
    "sync_key",
    "session_key",
    "pending_key",
    "join_answer",
    "reply_join",
    "add_catalog",
    "sync_response",
    "prepare_rebalance",
    "maybe_complete_join",
    "complete_join",
    "on_join_timer",
    "on_sync_timeout",
    "arm_session",
    "renew_session",
    "on_session_expired",
    "on_pending_expired",
    "drop_member",
    "after_member_removed",
    "fail_held",
    "expire_key",
    "is_bare",
    "expire_later",
    "on_expire",
]

log = logging.getLogger("groupcoord.coordinator")
S = GroupState
EAGER, COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE  # still exported from here


# ---------------------------------------------------------------------- join phase


def prepare_rebalance(m: Model, out: Outbox, group: Group, reason: str) -> None:
    """Enter PreparingRebalance: held syncs are answered REBALANCE_IN_PROGRESS, the join timer starts
    (for a new group, the initial delay that lets a starting fleet form one generation)."""
    out.cancel(sync_key(group.group_id))  # a new phase: nobody owes a SyncGroup any more
    group.pending_sync.clear()
    if group.state is S.AWAITING_SYNC:
        for member in group.members.values():
            if member.sync_token is not None:
                out.fail(member.sync_token, group.group_id, pb.SyncGroupResponse, error(pb.REBALANCE_IN_PROGRESS,
                                                                                        reason))
                member.sync_token = None
                arm_session(m, out, group, member)  # answered: its session starts again
    was_empty = group.state is S.EMPTY
    group.prepare_rebalance()
    delay_ms = m.config.group_initial_rebalance_delay_ms
    if was_empty and delay_ms > 0:
        group.in_initial_delay = True
        group.new_member_during_delay = False
        group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
        _arm_phase(m, out, join_key(group.group_id), group, delay_ms / 1000)
    else:
        group.in_initial_delay = False
        _arm_phase(m, out, join_key(group.group_id), group, group.rebalance_timeout_ms() / 1000)
    log.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation, reason, extra={
        "event": "rebalance_started", "group": group.group_id, "generation": group.generation, "reason": reason})
    out.persist(group)
    maybe_complete_join(m, out, group)


def _arm_phase(m: Model, out: Outbox, key: TimerKey, group: Group, delay_s: float) -> None:
    """Arm a phase deadline (join or sync), noting the coordinator's lost time so far."""
    group.phase_lost_mark = m.lateness()
    out.arm(key, delay_s)


def _phase_time_owed(m: Model, out: Outbox, key: TimerKey, group: Group) -> bool:
    """At a phase deadline: if the coordinator itself lost time during the phase (a stalled or
    overloaded event loop, see ``coordinator.runtime.lag``), the deadline moves by that much and this says
    so. Members whose JoinGroup or SyncGroup waited in the coordinator's own backlog are not
    removed for it, as their sessions are not expired for it."""
    owed = m.lateness() - group.phase_lost_mark
    if owed <= 0.001:
        return False
    group.phase_lost_mark += owed
    out.arm(key, owed)
    return True


def on_join_timer(m: Model, out: Outbox, group: Group) -> None:
    if group.state is not S.PREPARING_REBALANCE:
        return
    if _phase_time_owed(m, out, join_key(group.group_id), group):
        return
    if group.in_initial_delay and group.new_member_during_delay and group.initial_delay_remaining_ms > 0:
        # Kafka's InitialDelayedJoin: members keep arriving, wait one more delay (bounded).
        delay = min(m.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
        group.initial_delay_remaining_ms -= delay
        group.new_member_during_delay = False
        _arm_phase(m, out, join_key(group.group_id), group, delay / 1000)
        return
    complete_join(m, out, group)


def maybe_complete_join(m: Model, out: Outbox, group: Group) -> None:
    if group.state is S.PREPARING_REBALANCE and not group.in_initial_delay and group.all_members_joined():
        complete_join(m, out, group)


def complete_join(m: Model, out: Outbox, group: Group) -> None:
    """End the join phase: drop dynamic members that did not re-join (static ones stay until their
    session expires), start the next generation, answer every held JoinGroup (the leader's with
    members, tasks and load) and expect a SyncGroup from every member within the rebalance timeout.
    It touches every member once, as ``Model.bulk`` expects."""
    with m.bulk():
        _complete_join(m, out, group)


def _complete_join(m: Model, out: Outbox, group: Group) -> None:
    out.cancel(join_key(group.group_id))
    group.in_initial_delay = False
    for member in [mb for mb in group.members.values() if mb.join_token is None and not mb.is_static]:
        log.info("group %s: removing %s, which did not re-join in time", group.group_id, member.member_id, extra={
            "event": "member_removed", "group": group.group_id, "member": member.member_id,
            "instance": member.instance_id, "reason": "did not re-join in time"})
        drop_member(out, group, member)
    joined = [mb for mb in group.members.values() if mb.join_token is not None]
    if group.members and not joined:
        # only absent static members are left: wait for them (or for their sessions to expire)
        log.info("group %s: no member re-joined; waiting another rebalance timeout", group.group_id)
        _arm_phase(m, out, join_key(group.group_id), group, group.rebalance_timeout_ms() / 1000)
        return
    owners = _running(m, out, group)
    group.generation += 1
    group.assignment = {}
    group.user_data = {}
    group.unassigned = []
    group.revoking = set()
    group.synced = set()
    cooperative = bool(group.members) and all(RebalanceProtocol.COOPERATIVE in mb.rebalance_protocols
                                              for mb in group.members.values())
    group.rebalance_protocol = RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER
    group.owners = owners
    if not group.members:
        group.protocol = ""
        group.leader_id = ""
        group.become_empty()
        log.info("group %s: empty at generation %d", group.group_id, group.generation, extra={
            "event": "group_empty", "group": group.group_id, "generation": group.generation})
        out.persist(group)
        expire_later(m, out, group)
        return
    group.protocol = group.select_protocol()
    leader = group.members.get(group.leader_id)
    if leader is None or leader.join_token is None:
        group.leader_id = joined[0].member_id  # Kafka's maybeElectNewJoinedLeader
    now = m.clock.now()
    group.complete_join()
    group.pending_sync = {mb.member_id for mb in group.members.values() if not mb.departed}
    _arm_phase(m, out, sync_key(group.group_id), group, group.rebalance_timeout_ms() / 1000)
    out.persist(group)  # durable before anyone hears of the generation (the runtime holds replies)
    log.info(
        "group %s: generation %d with %d member(s), leader %s, assignor %s",
        group.group_id, group.generation, len(group.members), group.leader_id, group.protocol,
        extra={"event": "join_completed", "group": group.group_id, "generation": group.generation,
               "members": len(group.members), "leader": group.leader_id, "assignor": group.protocol},
    )
    like = join_answer(group)
    for member in _leader_first(group):  # its answer first: the group's SyncGroups wait for the leader's
        token = group.take_join(member)
        member.is_new = False
        if member.departed:
            continue  # its grace runs on
        member.last_seen = now
        arm_session(m, out, group, member)
        if token is not None:
            reply_join(out, token, group, member, like=like)


def _leader_first(group: Group) -> list[Member]:
    """The group's members, its leader first (the others in their order)."""
    leader = group.members.get(group.leader_id)
    if leader is None:
        return list(group.members.values())
    return [leader, *(mb for mb in group.members.values() if mb is not leader)]


def _running(m: Model, out: Outbox, group: Group) -> Owners:
    """Who may still run each replica as the next generation begins (``coordinator.model.ownership``):
    the coordinator's record of each member, narrowed by what a re-joined member says it runs.
    Claims beyond the record are ignored: one log line per member and generation, and counted."""
    claims = {mb.member_id: (mb.metadata.owned if mb.join_token is not None else None)
              for mb in group.members.values()}
    # a member that re-joined claiming nothing may run nothing, whatever its record says (``running``
    # keeps record ∩ claim): its record is not worth building (eager members, which stop everything
    # before they re-join, claim nothing: 100,000 replicas not turned into pairs at each rebalance)
    before = by_member(group.owners)
    records = {
        mb.member_id: record_of(group.assignment.get(mb.member_id, ()), before.get(mb.member_id, set()),
                                confirmed=mb.join_token is not None and mb.member_id in group.synced)
        for mb in group.members.values() if claims[mb.member_id] is None or claims[mb.member_id]
    }
    owners, ignored = running(records, claims)
    for member_id, replicas in ignored.items():
        shown = ", ".join(f"{t}#{r}" for t, r in replicas[:5]) + (" ..." if len(replicas) > 5 else "")
        log.warning("group %s: generation %d: member %s claims %d task replica(s) the coordinator did not "
                    "assign it (%s): ignored", group.group_id, group.generation + 1, member_id, len(replicas),
                    limits.escaped(shown[:200]), extra={
                        "event": "ownership_claim_ignored", "group": group.group_id,
                        "generation": group.generation + 1, "member": member_id, "replicas": len(replicas)})
        out.count("ownership_claims_ignored")
    return owners


def on_sync_timeout(m: Model, out: Outbox, group: Group) -> None:
    """Members that have not sent SyncGroup a rebalance timeout after the join phase are removed,
    even if the leader's assignment made the group Stable meanwhile (KAFKA-12890)."""
    if group.state in (S.AWAITING_SYNC, S.STABLE) and _phase_time_owed(m, out, sync_key(group.group_id), group):
        return
    if group.state is S.AWAITING_SYNC and not group.pending_sync:
        # everyone sent SyncGroup but the leader's assignment never completed: never wait forever
        prepare_rebalance(m, out, group, "the leader's assignment did not arrive within the rebalance timeout")
        return
    if group.state not in (S.AWAITING_SYNC, S.STABLE) or not group.pending_sync:
        return
    missing = sorted(group.pending_sync)
    for member_id in missing:
        member = group.members.get(member_id)
        if member is not None:
            fail_held(out, group, member, pb.UNKNOWN_MEMBER_ID, "did not send SyncGroup in time")
            drop_member(out, group, member)
    after_member_removed(m, out, group, f"member(s) {', '.join(missing)} did not send SyncGroup in time")


# ---------------------------------------------------------------------- members


def arm_session(m: Model, out: Outbox, group: Group, member: Member) -> None:
    """The member was heard from (or answered): its session starts again."""
    out.arm(*renew_session(m, group, member))


def renew_session(m: Model, group: Group, member: Member) -> tuple[TimerKey, float]:
    """The member's session starts again: its timer's key and delay, for the caller to arm."""
    member.departed = False
    member.lost_mark = m.lateness()
    return session_key(group.group_id, member.member_id), member.session_timeout_ms / 1000


def on_session_expired(m: Model, out: Outbox, group: Group, member_id: str) -> None:
    member = group.members.get(member_id)
    if member is None:
        return
    if member.is_awaiting:
        arm_session(m, out, group, member)  # parked in Join/Sync: alive by definition
        return
    owed = m.lateness() - member.lost_mark
    if owed > 0.001:
        # the coordinator itself could not run for ``owed`` seconds of this session (an overloaded
        # or stalled event loop): the member's heartbeats may be waiting in line; never expire a
        # member for time the coordinator lost
        member.lost_mark += owed
        out.arm(session_key(group.group_id, member_id), owed)
        return
    grace_ms = m.config.group_departed_member_grace_ms
    if member.is_static and grace_ms > 0 and not member.departed:
        member.departed = True  # its tasks wait for it; back in time, it takes them again
        log.info("group %s: static member %s (%s) departed; its tasks wait %d ms for it", group.group_id,
                 member.instance_id, member_id, grace_ms, extra={
                     "event": "member_departed", "group": group.group_id, "member": member_id,
                     "instance": member.instance_id, "reason": "session expired"})
        out.arm(session_key(group.group_id, member_id), grace_ms / 1000)
        return
    what = "new-member join timeout" if member.is_new else "session"
    log.info("group %s: %s of %s expired", group.group_id, what, member_id, extra={
        "event": "member_expired", "group": group.group_id, "member": member_id, "instance": member.instance_id,
        "reason": f"{what} expired"})
    fail_held(out, group, member, pb.UNKNOWN_MEMBER_ID, "the member's session expired")
    drop_member(out, group, member)
    after_member_removed(m, out, group, f"session of member {member_id} expired")


def on_pending_expired(m: Model, out: Outbox, group: Group, member_id: str) -> None:
    if member_id not in group.pending_members:
        return
    group.pending_members.discard(member_id)
    log.info("group %s: pending member %s never joined", group.group_id, member_id)
    maybe_complete_join(m, out, group)
    if is_bare(group) and group.generation == 0 and group.load_snapshot is None:
        m.drop_group(group)  # only ever asked for a member id: nothing worth keeping
        out.forget(group.group_id)
    elif group.state is S.EMPTY and not group.members and not group.pending_members:
        out.persist(group)
        expire_later(m, out, group)


def is_bare(group: Group) -> bool:
    """Empty, with no pending ids and no catalog: nothing a member or an operator left behind."""
    return group.state is S.EMPTY and not group.members and not group.pending_members and not group.tasks


def expire_later(m: Model, out: Outbox, group: Group) -> None:
    """A bare group is deleted after the empty-group retention, unless something comes back to it."""
    if is_bare(group):
        out.arm(expire_key(group.group_id), m.config.group_empty_retention_ms / 1000)


def on_expire(m: Model, out: Outbox, group: Group) -> None:
    if is_bare(group):
        log.info("group %s: empty for group_empty_retention_ms: deleted", group.group_id, extra={
            "event": "group_deleted", "group": group.group_id, "reason": "empty for group_empty_retention_ms"})
        m.drop_group(group)
        out.forget(group.group_id)


def drop_member(out: Outbox, group: Group, member: Member) -> None:
    group.remove(member.member_id)
    out.cancel(session_key(group.group_id, member.member_id))


def after_member_removed(m: Model, out: Outbox, group: Group, reason: str) -> None:
    if group.state in (S.STABLE, S.AWAITING_SYNC):
        prepare_rebalance(m, out, group, reason)
    elif group.state is S.PREPARING_REBALANCE:
        if not group.members:
            complete_join(m, out, group)
        else:
            # not written (as Kafka writes nothing until the phase ends): a record is O(members), and a
            # fleet leaving one by one would write it once per member; a restart before the phase ends
            # runs the phase again, where a dynamic member that left is dropped for not re-joining (a static
            # one once its session expires)
            maybe_complete_join(m, out, group)
