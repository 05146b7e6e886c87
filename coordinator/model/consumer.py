"""The consumer protocol (KIP-848) on the coordinator: GroupHeartbeat in, effects out.

``ConsumerGroups`` keeps every consumer-protocol group of the model. One heartbeat:

* member epoch 0 joins (a static member whose instance is away, epoch -2, takes its place and
  its tasks; a live one holding the instance id refuses the newcomer: UNRELEASED_INSTANCE_ID);
* -1 leaves (its tasks free at once); -2 leaves for a while (a static member's tasks wait for it);
* any other epoch must be the member's current one, or its previous one with no more than its
  assignment owned (the answer that bumped it may have been lost); else FENCED_MEMBER_EPOCH;
* then the member alone is reconciled toward its target (``reconcile``): no other member is read.

Membership, metadata and catalog changes bump the group epoch; a keyed timer per group
(``c-assign``) then asks for a new target at most once per ``assignment_interval_ms``, computed off
the loop (``consumer_target``) or by a leader member (``leader_assignor``). Sessions (``c-session``)
and revocations past the member's rebalance timeout (``c-revoke``) end on timers.

The group's catalog, load snapshot and record are those of the classic group of the same id
(Empty); the consumer state is the record's ``consumer`` entry (``consumer_records``), written before
a member hears of a change. A classic group converts when a consumer-protocol member joins it, and
back when its last one leaves (``conversion``; its classic members: ``classic_members``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from types import EllipsisType
from typing import Any

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model import consumer_split, consumer_static, conversion, leader_assignor, phases
from groupcoord.coordinator.model.consumer_answer import ConsumerSettings, answer
from groupcoord.coordinator.model.consumer_assignor import heard, named_of, rechoose, switched, unsupported
from groupcoord.coordinator.model.consumer_checks import admission_error, owned_of, request_error
from groupcoord.coordinator.model.consumer_group import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_records import consumer_from_record, member_entry, write_of
from groupcoord.coordinator.model.consumer_target import SplitTarget, TargetInputs, inputs_of, installed, target_for
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import Effect, Outbox, Persist, TimerKey, Token, error
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.prechecks import Verdict
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled, reconcile
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ConsumerGroups", "ConsumerSettings", "TIMER_KINDS"]

log = logging.getLogger("groupcoord.consumer")
TIMER_KINDS = frozenset({"c-session", "c-revoke", "c-assign", "c-leader"})


class ConsumerGroups:
    """Every consumer-protocol group of one model; each entry point adds its effects to ``out``."""

    def __init__(self, model: Model, settings: ConsumerSettings | None = None,
                 new_member_id: Callable[[str], str] | None = None) -> None:
        self.m = model
        config = model.config
        self.settings = settings or ConsumerSettings(
            heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
            session_timeout_ms=config.consumer_session_timeout_ms,
            assignment_interval_ms=config.consumer_assignment_interval_ms)
        self.groups: dict[str, ConsumerGroup] = {}
        self._new_member_id = new_member_id or (lambda prefix: f"{prefix}-{uuid.uuid4()}")
        self._assignors: set[str] = set()  # names known to resolve
        self._last_assign: dict[str, float] = {}  # group id -> when its last computation started

    # ------------------------------------------------------------------ requests

    def heartbeat(self, out: Outbox, request: pb.GroupHeartbeatRequest, token: Token,
                  host: str = "", principal: str = "", checked: Verdict | None = None) -> None:
        """``checked``: the request's bounds, when the service checked them on a thread (a long ``owned``)."""
        bounds = checked.failure if checked is not None else request_error(self.m.config, request)
        failure = bounds or self.m.check_group_id(request.group_id) or unsupported(self._assignors, named_of(request))
        classic = self.m.groups.get(request.group_id)
        if failure is None and classic is not None and (classic.members or classic.pending_members):
            failure = conversion.converting_join(self, out, classic, request, principal)
        if failure is None:
            if request.member_epoch == 0:
                failure = self._join(out, request, token, host, principal)
            elif request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                failure = self._leave(out, request, token)
            else:
                failure = self._beat(out, request, token)
        if failure is not None:
            out.fail(token, "", pb.GroupHeartbeatResponse, failure)

    def _join(self, out: Outbox, request: pb.GroupHeartbeatRequest, token: Token, host: str,
              principal: str) -> pb.Error | None:
        group = self.groups.get(request.group_id)
        assignor = request.assignor or (group.assignor if group else self.settings.default_assignor)
        failure = consumer_static.instance_changed(group, request) if group is not None else None
        if failure is not None:
            return failure
        if group is not None and request.instance_id in group.static_members:
            return consumer_static.rejoin(self, out, group, request, token)
        if group is not None and request.member_id in group.members:  # a retried join: its state, in full
            return self._renewed(out, group, group.members[request.member_id], request, token)
        failure = self.admission(group, request, assignor, principal)
        if failure is not None:
            return failure
        if group is None:
            group = self._new_group(request.group_id, assignor, principal)
        prefix = request.instance_id or request.client_id or "member"
        member = ConsumerMember(
            member_id=request.member_id or self._new_member_id(prefix), instance_id=request.instance_id,
            client_id=request.client_id, host=host, principal=principal, metadata=request.metadata,
            session_timeout_ms=request.session_timeout_ms or self.settings.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms or self.settings.rebalance_timeout_ms,
            assignor=request.assignor)
        member.reconciled = Reconciled(MemberState.STABLE, group.target_epoch, frozenset())
        group.add(member)
        rechoose(out, group, self.settings.default_assignor)
        log.info("group %s: member %s joined (consumer protocol)", group.group_id, member.member_id,
                 extra={"event": "member_joined", "group": group.group_id, "member": member.member_id})
        self._changed(out, group)
        return self._renewed(out, group, member, request, token)

    def admission(self, group: ConsumerGroup | None, request: pb.GroupHeartbeatRequest, assignor: str,
                  principal: str) -> pb.Error | None:
        """Why a new member may not join (None: it may): ``consumer_checks.admission_error``."""
        return admission_error(self.m, self._assignors, group, request, assignor, principal)

    def _new_group(self, group_id: str, assignor: str, principal: str) -> ConsumerGroup:
        if group_id not in self.m.groups:  # the group's catalog and snapshot live in its classic record
            self.m.new_group(group_id, creator=principal)
        classic = self.m.groups[group_id]
        group = self.groups[group_id] = ConsumerGroup(group_id, assignor, catalog_version=classic.catalog_version,
                                                      entry_of=member_entry)
        return group

    def _leave(self, out: Outbox, request: pb.GroupHeartbeatRequest, token: Token) -> pb.Error | None:
        group = self.groups.get(request.group_id)
        member, failure = self._member(group, request)
        if failure is not None or group is None or member is None:
            return failure
        out.cancel(TimerKey("c-revoke", group.group_id, member.member_id))
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            member.away = True  # its tasks wait for it; what it was giving up it has stopped (it left)
            log.info("group %s: static member %s (instance %s) away (consumer protocol)", group.group_id,
                     member.member_id, member.instance_id,
                     extra={"event": "member_away", "group": group.group_id, "member": member.member_id})
            group.hold(member, Reconciled(MemberState.STABLE, member.epoch, member.reconciled.assigned))
            group.refresh(member)
            self._persist(out, group)
            out.reply(token, group.group_id, pb.GroupHeartbeatResponse(
                member_id=member.member_id, member_epoch=STATIC_LEAVE_EPOCH,
                heartbeat_interval_ms=self.settings.heartbeat_interval_ms))
            return None
        self._remove(out, group, member, "left the group")
        out.reply(token, group.group_id, pb.GroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_EPOCH,
                                                       heartbeat_interval_ms=self.settings.heartbeat_interval_ms))
        return None

    def _beat(self, out: Outbox, request: pb.GroupHeartbeatRequest, token: Token) -> pb.Error | None:
        group = self.groups.get(request.group_id)
        member, failure = self._member(group, request)
        if failure is not None or group is None or member is None:
            return failure
        owned = owned_of(request, member.sent_wire)
        received = request.member_epoch
        stale = received < member.epoch and not 0 < member.accepts_from <= received and (
            received != member.previous_epoch or owned is None or not owned <= member.reconciled.assigned)
        if member.away or received > member.epoch or stale:
            return error(pb.FENCED_MEMBER_EPOCH, f"member epoch {received} is not member {member.member_id}'s "
                         f"({member.epoch}): stop every task and join again with epoch 0")
        moved = heard(out, group, member, named_of(request), self.settings.default_assignor)
        if request.HasField("metadata") and request.metadata != member.metadata:
            member.metadata, member.info = request.metadata, None
            group.refresh(member)
            moved = True
        if moved:
            self._changed(out, group)
        elif moved is not None:  # renamed, the group's assignor the same: the member's record only
            self._persist(out, group)
        if request.HasField("target"):  # a leader's answer (``leader_assignor``)
            leader_assignor.take_answer(self, out, group, member, request.target)
        return self._renewed(out, group, member, request, token, owned)

    def _member(self, group: ConsumerGroup | None,
                request: pb.GroupHeartbeatRequest) -> tuple[ConsumerMember | None, pb.Error | None]:
        """The member a request names, by instance id first (Kafka's static member checks)."""
        if group is None:
            return None, error(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group "
                               f"{request.group_id!r} (it has no consumer-protocol members): join again with epoch 0")
        if request.instance_id:
            current = group.static_members.get(request.instance_id)
            if current is None:
                return None, error(pb.UNKNOWN_MEMBER_ID, f"instance {request.instance_id!r} is not in the group")
            if current != request.member_id:
                return None, error(pb.FENCED_INSTANCE_ID, f"instance {request.instance_id!r} is member {current} now; "
                                   f"{request.member_id!r} is fenced")
        member = group.members.get(request.member_id)
        if member is None:
            return None, error(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group "
                               f"{group.group_id!r}: join again with epoch 0")
        return member, None

    def _renewed(self, out: Outbox, group: ConsumerGroup, member: ConsumerMember,
                 request: pb.GroupHeartbeatRequest, token: Token,
                 owned: frozenset[TaskReplica] | None | EllipsisType = ...) -> pb.Error | None:
        """Renew the member's session, apply its changed timeouts, reconcile it, answer it. ``owned``: the
        request's ``owned_of``, when the caller read it already (a giver's list of 100 tasks is read once)."""
        if request.HasField("rebalance_timeout_ms") or request.HasField("session_timeout_ms"):
            member.rebalance_timeout_ms = request.rebalance_timeout_ms or member.rebalance_timeout_ms
            member.session_timeout_ms = request.session_timeout_ms or member.session_timeout_ms
            group.refresh(member)
            self._persist(out, group)
        member.lost_mark, member.last_seen = self.m.lateness(), self.m.clock.now()
        out.arm(TimerKey("c-session", group.group_id, member.member_id), member.session_timeout_ms / 1000)
        before = member.reconciled
        if owned is ...:
            owned = owned_of(request)
        after = reconcile(before, group.target_epoch, group.target_of(member.member_id), owned,
                          group.held_elsewhere(member.member_id))
        written = after is not before and group.hold(member, after)  # an epoch alone is not written
        revoke_key = TimerKey("c-revoke", group.group_id, member.member_id)
        if after.state is MemberState.UNREVOKED_TASKS and after.revoking != before.revoking:
            out.arm(revoke_key, member.rebalance_timeout_ms / 1000)
        elif before.state is MemberState.UNREVOKED_TASKS and after.state is not MemberState.UNREVOKED_TASKS:
            out.cancel(revoke_key)
        if written:
            self._persist(out, group)
        response = answer(member, self.settings.heartbeat_interval_ms, request.member_epoch, owned)
        leader_assignor.attach(group, member, response)
        out.reply(token, group.group_id, response)
        return None

    # ------------------------------------------------------------------ changes and timers

    def _changed(self, out: Outbox, group: ConsumerGroup) -> None:
        """A new group epoch; its target is asked for at most once per assignment interval."""
        group.bump()
        self._persist(out, group)
        self._ask_target(out, group)

    def _ask_target(self, out: Outbox, group: ConsumerGroup) -> None:
        if group.computing and not leader_assignor.leader_left(self, out, group):
            return  # asked for again when the running computation lands
        last = self._last_assign.get(group.group_id)
        now = self.m.clock.now()
        interval = self.settings.assignment_interval_ms / 1000
        delay = 0.0 if last is None else max(0.0, last + interval - now)
        out.arm(TimerKey("c-assign", group.group_id), delay)

    def _remove(self, out: Outbox, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        log.info("group %s: member %s %s (consumer protocol)", group.group_id, member.member_id, why,
                 extra={"event": "member_removed", "group": group.group_id, "member": member.member_id, "reason": why})
        group.remove(member)
        group.orphans.update(group.target.pop(member.member_id, ()))
        out.cancel(TimerKey("c-session", group.group_id, member.member_id))
        out.cancel(TimerKey("c-revoke", group.group_id, member.member_id))
        if conversion.should_downgrade(group, member):
            conversion.downgrade(self, out, group)
            return
        if group.members:
            rechoose(out, group, self.settings.default_assignor)
            self._changed(out, group)
            return
        del self.groups[group.group_id]  # nothing left to reconcile: the id is free for either protocol
        self.forget_assignments(out, group.group_id)
        classic = self.m.groups.get(group.group_id)
        if classic is not None:
            out.persist(classic)  # its record without the consumer part
            phases.expire_later(self.m, out, classic)  # deleted after the retention if nothing is left

    def forget_assignments(self, out: Outbox, group_id: str) -> None:
        """The group is no consumer group any more: no target to compute for it."""
        self._last_assign.pop(group_id, None)
        out.cancel(TimerKey("c-assign", group_id))

    def fire(self, out: Outbox, key: TimerKey) -> None:
        group = self.groups.get(key.group_id)
        if group is None:
            return
        if key.kind in ("c-assign", "c-leader"):
            self._start_target(out, group) if key.kind == "c-assign" else leader_assignor.timed_out(self, out, group)
            return
        member = group.members.get(key.member_id)
        if member is None:
            return
        if key.kind == "c-revoke":
            if member.reconciled.state is MemberState.UNREVOKED_TASKS:
                self._remove(out, group, member, "did not give its tasks up within its rebalance timeout")
            return
        owed = self.m.lateness() - member.lost_mark
        if owed > 0.001:  # never expire a member for time the coordinator itself lost
            member.lost_mark += owed
            out.arm(key, owed)
            return
        self._remove(out, group, member, "session expired")

    def catalog_changed(self, out: Outbox, group_id: str) -> None:
        """After a catalog edit (or a deleted classic record): a catalog change moves the group epoch."""
        group = self.groups.get(group_id)
        if group is None:
            return
        classic = self.m.groups.get(group_id)
        version = classic.catalog_version if classic is not None else None
        if version != group.catalog_version:
            group.catalog_version = version
            self._changed(out, group)

    def _start_target(self, out: Outbox, group: ConsumerGroup) -> None:
        if group.computing or group.target_epoch >= group.epoch:
            return
        if leader_assignor.is_client(group.assignor):
            return leader_assignor.ask(self, out, group)
        inputs, ids = inputs_of(group, self.m.groups.get(group.group_id)), set(group.members)
        group.computing = True
        self._last_assign[group.group_id] = self.m.clock.now()
        out.offload(lambda: target_for(inputs, ids), lambda result: self._install(group, inputs, result))

    def _install(self, group: ConsumerGroup, inputs: TargetInputs, result: Any) -> list[Effect]:
        """A computation landed (on the loop): the target of its epoch, unless the group is gone."""
        out = Outbox(self.to_record)
        if self.groups.get(group.group_id) is not group:
            return []
        group.computing = False
        epoch = inputs.epoch
        moved = switched(inputs.assignor, group)  # the group's assignor changed meanwhile
        split = consumer_split.accept(self.m, group, result) if isinstance(result, SplitTarget) else None
        if split is not None:
            result = split.target
        if isinstance(result, dict):
            installed(group, inputs, result)
            if split is not None and split.catalog is not None:
                group.target_catalog = split.catalog  # the catalog after the split, written with the target
            group.target_catalog = None if moved else group.target_catalog  # the new one's first pass is full
            group.target_epoch, group.last_error = epoch, split.refused if split is not None else ""
            self._persist(out, group)
        else:
            group.last_error = str(result)
            log.warning("group %s: no new target for epoch %d: %s", group.group_id, epoch, group.last_error,
                        extra={"event": "target_failed", "group": group.group_id, "reason": group.last_error})
        if group.target_epoch < group.epoch and (isinstance(result, dict) or moved):
            self._ask_target(out, group)  # changes came in meanwhile
        return out.effects()

    # ------------------------------------------------------------------ records

    def _persist(self, out: Outbox, group: ConsumerGroup) -> None:
        """Write the group's record (its classic part and this one); answers wait for it."""
        classic = self.m.groups.get(group.group_id)
        if classic is None:  # its catalog holder went (never while it has members, but be whole)
            classic = self.m.new_group(group.group_id)
        out.persist(classic)

    def to_record(self, classic: Group) -> dict[str, Any] | Persist:
        """A group's write: the classic record, and the consumer part's changed records when it has one."""
        return write_of(classic, self.groups.get(classic.group_id))

    def resume(self, out: Outbox, group_id: str, record: dict[str, Any] | None,
               parts: dict[str, Any] | None = None) -> None:
        """After a restart or a failover: the group as stored; sessions start afresh (members go on
        heartbeating with their epochs), as do revocation deadlines; a target behind is asked for."""
        self.groups.pop(group_id, None)
        classic = self.m.groups.get(group_id)
        if not record or classic is None:
            return
        group = self.groups[group_id] = consumer_from_record(group_id, record, parts, classic.catalog_version,
                                                             self.m.clock.now())
        self._assignors.add(group.assignor)
        for member in group.members.values():
            member.lost_mark = self.m.lateness()  # only time lost from now on extends its session
            out.arm(TimerKey("c-session", group_id, member.member_id), member.session_timeout_ms / 1000)
            if member.reconciled.state is MemberState.UNREVOKED_TASKS:
                out.arm(TimerKey("c-revoke", group_id, member.member_id), member.rebalance_timeout_ms / 1000)
        if group.target_epoch < group.epoch:
            self._ask_target(out, group)

    def held(self, group_id: str) -> dict[TaskReplica, str]:
        """Who holds each task replica of a group (tests, tools)."""
        group = self.groups.get(group_id)
        return dict(group.holder) if group is not None else {}

    def validate(self) -> None:
        for group in self.groups.values():
            group.validate()
