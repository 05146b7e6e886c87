"""Converting a running group between the two protocols (Kafka 4's online upgrade and downgrade).

**Upgrade.** The first consumer-protocol member (a ``GroupHeartbeat`` with epoch 0) of a group
whose members speak the classic protocol turns it into a consumer group, as Kafka's
``convertToConsumerGroup`` does: every classic member becomes a member of the consumer group
(``ConsumerMember.classic`` set) at the classic generation as its epoch, with what the
coordinator's own record says it may run (its assignment; and, if a cooperative move was still
under way, the replicas it has not confirmed it stopped, as tasks being given up), and that
assignment as the group's first target. The classic group stays, Empty, as the holder of the
catalog and the load snapshot (as for every consumer group). Then the newcomer joins as any
member does: the group epoch moves and the server-side assignor computes the next target.

Refused (the newcomer gets the error; nothing changes) when the classic group is not Stable (a
rebalance under way: REBALANCE_IN_PROGRESS, retriable), or when the coordinator's record has a
replica possibly run by two members (the same), or by the newcomer's own admission checks.

**Downgrade.** When the last consumer-protocol member of a converted group is gone (left, session
ended, removed) and classic members remain, the group becomes classic again, as Kafka's
``convertToClassicGroup``: each member keeps its record (what it holds, including what it is
giving up) and the group prepares a rebalance at the latest target epoch as its generation.

Safety across either step: a replica is held by one member in the coordinator's view before and
after (the consumer group's ``holder`` map refuses two), and the classic ownership record of a
downgraded group is what each member held, so the next cooperative generation hands a replica
on only once its holder re-joined without it (``coordinator.model.ownership``).
"""

from __future__ import annotations

import logging

from groupcoord.assignors.base import RebalanceProtocol, TaskReplica
from groupcoord.coordinator.model import phases
from groupcoord.coordinator.model.consumer_group import ClassicTraits, ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_records import member_entry
from groupcoord.coordinator.model.consumer_steps import ConsumerSteps
from groupcoord.coordinator.model.effects import Outbox, TimerKey, error
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["converting_join", "upgrade_refusal", "upgrade", "downgrade", "should_downgrade", "COOPERATIVE"]

log = logging.getLogger("groupcoord.consumer")
EAGER, COOPERATIVE = RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE
Held = dict[str, tuple[frozenset[TaskReplica], frozenset[TaskReplica]]]


def _held(classic: Group) -> tuple[Held, TaskReplica | None]:
    """What each classic member may run by the coordinator's record: (its assignment, what it may
    still run beyond it), and a replica two members may run, if any (then no conversion). Only a
    cooperative generation carries tasks over: in an eager one every member stopped everything
    before it joined, and its ``owners`` is what the leader was told, not what anyone runs."""
    assigned = {mid: frozenset(TaskReplica(r.task_id, r.replica) for r in classic.assignment.get(mid, ()))
                for mid in classic.members}
    beyond: dict[str, set[TaskReplica]] = {mid: set() for mid in classic.members}
    holder: dict[TaskReplica, str] = {}
    for member_id, tasks in assigned.items():
        for task in tasks:
            holder[task] = member_id
    carried = classic.owners if classic.rebalance_protocol == COOPERATIVE else {}
    for (task_id, replica), who in carried.items():
        task = TaskReplica(task_id, replica)
        for member_id in who:
            if member_id not in beyond or task in assigned[member_id]:
                continue
            if holder.setdefault(task, member_id) != member_id:
                return {}, task
            beyond[member_id].add(task)
    return {mid: (assigned[mid], frozenset(beyond[mid])) for mid in classic.members}, None


def upgrade_refusal(classic: Group) -> pb.Error | None:
    """Why the classic group cannot become a consumer group now (None: it can)."""
    if classic.state is not GroupState.STABLE:
        return error(pb.REBALANCE_IN_PROGRESS, f"group {classic.group_id!r} runs the classic protocol and is "
                     f"{classic.state.value}; it converts to the consumer protocol only when Stable: retry")
    _, shared = _held(classic)
    if shared is not None:
        return error(pb.REBALANCE_IN_PROGRESS, f"group {classic.group_id!r}: task {shared.task_id}#{shared.replica} "
                     f"is moving between two classic members; retry once it has moved")
    return None


def converting_join(cg: ConsumerSteps, out: Outbox, classic: Group, request: pb.GroupHeartbeatRequest,
                    principal: str) -> pb.Error | None:
    """A consumer-protocol member for a classic group with members: the group converts (``upgrade``)
    when the newcomer joins (epoch 0) and would be admitted; else the error that answers it."""
    if request.member_epoch == 0 and not classic.members:  # only pending ids: its first members are joining
        return error(pb.REBALANCE_IN_PROGRESS, f"group {request.group_id!r} runs the classic protocol and its "
                     f"first members are still joining; it converts to the consumer protocol once Stable: retry")
    if request.member_epoch != 0:
        return error(pb.INCONSISTENT_GROUP_PROTOCOL, f"group {request.group_id!r} runs the classic protocol "
                     f"({len(classic.members)} members): a consumer-protocol member converts it by joining "
                     f"(epoch 0) once it has members and is Stable")
    assignor = request.assignor or cg.settings.default_assignor
    failure = upgrade_refusal(classic) or cg.admission(None, request, assignor, principal)
    if failure is None and len(classic.members) >= cg.m.config.group_max_size:
        failure = error(pb.GROUP_MAX_SIZE_REACHED, f"group {request.group_id!r} has {len(classic.members)} "
                        f"members (group_max_size)")
    if failure is None:
        upgrade(cg, out, classic, assignor)
    return failure


def upgrade(cg: ConsumerSteps, out: Outbox, classic: Group, assignor: str) -> ConsumerGroup:
    """The classic group's members, moved into a new consumer group (``upgrade_refusal`` passed)."""
    held, _ = _held(classic)
    generation = classic.generation
    group = ConsumerGroup(classic.group_id, assignor, epoch=generation, target_epoch=generation,
                          catalog_version=classic.catalog_version, entry_of=member_entry)
    gid = classic.group_id
    for old in list(classic.members.values()):
        assigned, beyond = held[old.member_id]
        member = ConsumerMember(
            member_id=old.member_id, instance_id=old.instance_id, client_id=old.client_id, host=old.host,
            principal=old.principal, metadata=old.metadata, session_timeout_ms=old.session_timeout_ms,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            classic=ClassicTraits(old.protocols, old.protocol_type, old.rebalance_protocols))
        member.reconciled = Reconciled(MemberState.STABLE, generation, frozenset())
        member.lost_mark = cg.m.lateness()  # its session starts now: time lost before does not extend it
        group.add(member)
        state = MemberState.UNREVOKED_TASKS if beyond else MemberState.STABLE
        group.hold(member, Reconciled(state, generation, assigned, beyond))
        group.target[member.member_id] = assigned
        out.cancel(phases.session_key(gid, old.member_id))
        out.arm(TimerKey("c-session", gid, member.member_id), member.session_timeout_ms / 1000)
        if beyond:
            out.arm(TimerKey("c-revoke", gid, member.member_id), member.rebalance_timeout_ms / 1000)
        classic.remove(old.member_id)
    for member_id in list(classic.pending_members):  # ids handed out, not joined: they join afresh
        classic.pending_members.discard(member_id)
        out.cancel(phases.pending_key(gid, member_id))
    for key in (phases.join_key(gid), phases.sync_key(gid)):
        out.cancel(key)
    classic.assignment, classic.user_data, classic.owners = {}, {}, {}
    classic.revoking, classic.synced, classic.unassigned = set(), set(), []
    classic.protocol, classic.leader_id = "", ""
    classic.prepare_rebalance()
    classic.become_empty()
    cg.groups[gid] = group
    log.info("group %s: converted to the consumer protocol at generation %d (%d classic members)", gid, generation,
             len(group.members), extra={"event": "group_converted", "group": gid, "to": "consumer",
                                       "members": len(group.members)})
    return group


def should_downgrade(group: ConsumerGroup, removed: ConsumerMember) -> bool:
    """Kafka's rule: a consumer-protocol member is gone and every member left speaks the classic one;
    and (as a classic generation needs one) they share an assignor name and a protocol type."""
    if removed.classic is not None or not group.members or group.classic_members != len(group.members):
        return False
    traits = [m.classic for m in group.members.values() if m.classic is not None]
    common = set(traits[0].protocols).intersection(*(t.protocols for t in traits[1:]))
    return bool(common) and len({t.protocol_type for t in traits}) == 1


def downgrade(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup) -> None:
    """The consumer group's (all classic) members, back in the classic group, which rebalances."""
    m = cg.m
    gid = group.group_id
    classic = m.groups.get(gid) or m.new_group(gid)
    classic.generation = max(classic.generation, group.target_epoch)
    owners: dict[tuple[str, int], frozenset[str]] = {}
    now = m.clock.now()
    for cm in group.members.values():
        traits = cm.classic
        assert traits is not None
        member = Member(
            member_id=cm.member_id, group_id=gid, client_id=cm.client_id, instance_id=cm.instance_id, host=cm.host,
            session_timeout_ms=cm.session_timeout_ms, rebalance_timeout_ms=cm.rebalance_timeout_ms,
            protocols=traits.protocols, metadata=cm.metadata, protocol_type=traits.protocol_type,
            rebalance_protocols=traits.rebalance_protocols, principal=cm.principal, last_seen=now)
        classic.add(member)
        classic.assignment[cm.member_id] = [pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                            for t in sorted(cm.reconciled.assigned)]
        for task in cm.held:
            owners[(task.task_id, task.replica)] = frozenset({cm.member_id})
        out.cancel(TimerKey("c-session", gid, cm.member_id))
        out.cancel(TimerKey("c-revoke", gid, cm.member_id))
        phases.arm_session(m, out, classic, member)
    classic.owners = owners
    classic.rebalance_protocol = COOPERATIVE if all(
        COOPERATIVE in mb.rebalance_protocols for mb in classic.members.values()) else EAGER
    del cg.groups[gid]
    cg.forget_assignments(out, gid)
    log.info("group %s: converted back to the classic protocol at generation %d (%d members)", gid,
             classic.generation, len(classic.members), extra={"event": "group_converted", "group": gid,
                                                              "to": "classic", "members": len(classic.members)})
    phases.prepare_rebalance(m, out, classic, "the group's last consumer-protocol member is gone: back to classic")
    # not a new group: its members get the whole rebalance timeout to re-join, as from Stable (the
    # initial delay of an Empty group would drop a member still running its tasks after half a second)
    classic.in_initial_delay = False
    classic.phase_lost_mark = m.lateness()
    out.arm(phases.join_key(gid), classic.rebalance_timeout_ms() / 1000)
