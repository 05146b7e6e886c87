"""The coordinator's group model: Kafka's classic group protocol as requests in, effects out.

``CoordinatorModel`` holds every group this process coordinates and nothing else: no store,
no socket, no real clock. Each entry point takes one request (or a fired timer) with the
token the runtime gave it, changes groups only through the state machine of
``coordinator.model.states``, and returns the effects of ``coordinator.model.effects`` for the runtime to
carry out (the dask worker-state pattern: events in, instructions out). Tests drive it
directly on a ``FakeClock`` and check every step's effects (``coordinator.testing``).

Where the behaviour lives: ``join`` (JoinGroup), ``sync`` (SyncGroup), ``membership``
(Heartbeat, LeaveGroup, ReportLoad), ``admin`` (catalog, snapshots, describe, delete), each
with one handler per group state; ``phases`` holds the rebalance steps they share.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.coordinator.clock import Clock, SystemClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import admin, limits, phases
from groupcoord.coordinator.model.assignment_check import AssignmentCheck, AssignmentInputs, inputs_of
from groupcoord.coordinator.model.classic_members import classic_heartbeat, classic_join, classic_leave, classic_sync
from groupcoord.coordinator.model.consumer import TIMER_KINDS, ConsumerGroups
from groupcoord.coordinator.model.consumer_load import SHED_TIMER, LoadRechecks, report_load
from groupcoord.coordinator.model.effects import ArmTimer, Effect, Outbox, Reply, TimerKey, Token, error
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.coordinator.model.join import handle_join
from groupcoord.coordinator.model.membership import handle_heartbeat, handle_leave, handle_report_load, quick_heartbeat
from groupcoord.coordinator.model.prechecks import CatalogCheck, Verdict
from groupcoord.coordinator.model.records import group_from_record
from groupcoord.coordinator.model.states import GroupState, new_machine
from groupcoord.coordinator.model.sync import handle_sync
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CoordinatorModel"]

log = logging.getLogger("groupcoord.coordinator")
S = GroupState
R = TypeVar("R")

_TIMERS: dict[str, Callable[[CoordinatorModel, Outbox, Group, str], None]] = {
    "join": lambda m, out, group, _: phases.on_join_timer(m, out, group),
    "sync": lambda m, out, group, _: phases.on_sync_timeout(m, out, group),
    "session": phases.on_session_expired,
    "pending": phases.on_pending_expired,
    "expire": lambda m, out, group, _: phases.on_expire(m, out, group),
}


def random_member_id(name: str) -> str:
    """The default id source of new members: ``name``, "-" and a random UUID (``limits`` counts its 37 characters)."""
    return f"{name}-{uuid.uuid4()}"


class CoordinatorModel:
    """Every group of this process; each method returns the effects of one step."""

    def __init__(self, config: CoordinatorConfig | None = None, *, clock: Clock | None = None,
                 lateness: Callable[[], float] | None = None,
                 bulk: Callable[[], AbstractContextManager[None]] | None = None,
                 new_member_id: Callable[[str], str] | None = None) -> None:
        """``new_member_id(name)``: a new member's id, unique, from its instance or client id (tests
        inject a counter; by default the name, "-" and a random UUID)."""
        self.config = config or CoordinatorConfig()
        self.new_member_id: Callable[[str], str] = new_member_id or random_member_id
        self.clock = clock or SystemClock()
        self.groups: dict[str, Group] = {}
        self._created: dict[str, set[str]] = {}  # principal -> ids of the groups it created (its quotas)
        self._machine = new_machine()
        #: seconds the runtime measured this process unable to run (``coordinator.runtime.lag``); the
        #: runtime's own function, not a method around it: every heartbeat reads it
        self.lateness: Callable[[], float] = lateness or (lambda: 0.0)
        self._bulk = bulk or nullcontext
        #: the groups of the consumer protocol (KIP-848, ``coordinator.model.consumer``)
        self.consumer = ConsumerGroups(self, new_member_id=self.new_member_id)
        #: a consumer group's load check on a new snapshot, at its assignor's interval (``consumer_load``)
        self.rechecks = LoadRechecks(self.consumer)
        #: whose quotas a new group counts against: ``(group_id, creator) -> principal``; the process
        #: sets the ACL-based one (``coordinator.auth.prefix_owner``); by default the creator's
        self.account_of: Callable[[str, str], str] = lambda _group_id, creator: creator

    def bulk(self) -> AbstractContextManager[None]:
        """What the runtime wraps a phase's completion in (``bulk``; nothing by default)."""
        return self._bulk()

    # ------------------------------------------------------------------ requests

    def _step(self, handler: Callable[..., None], *args: Any) -> list[Effect]:
        out = Outbox(self.consumer.to_record)
        handler(self, out, *args)
        return out.effects()

    def join(self, request: pb.JoinGroupRequest, token: Token, host: str = "", principal: str = "") -> list[Effect]:
        if request.group_id in self.consumer.groups:  # a classic member of a consumer group
            return self._classic_step(classic_join, request, token, host, principal)
        return self._step(handle_join, request, token, host, principal)

    def _classic_step(self, handler: Callable[..., None], *args: Any) -> list[Effect]:
        """A classic request for a consumer-protocol group: ``coordinator.model.classic_members``."""
        out = Outbox(self.consumer.to_record)
        handler(self.consumer, out, *args)
        return out.effects()

    def group_heartbeat(self, request: pb.GroupHeartbeatRequest, token: Token, host: str = "",
                        principal: str = "", checked: Verdict | None = None) -> list[Effect]:
        """The consumer protocol's one request (``coordinator.model.consumer``)."""
        out = Outbox(self.consumer.to_record)
        self.consumer.heartbeat(out, request, token, host, principal, checked)
        return out.effects()

    def sync(self, request: pb.SyncGroupRequest, token: Token, checked: AssignmentCheck | None = None) -> list[Effect]:
        if request.group_id in self.consumer.groups:
            return self._classic_step(classic_sync, request, token)
        return self._step(handle_sync, request, token, checked)

    def assignment_inputs(self, request: pb.SyncGroupRequest) -> AssignmentInputs | None:
        """A copy of what the leader's assignment in ``request`` is checked against, or None when the
        request is not that (not the current leader's, in AwaitingSync, for this generation)."""
        group = self.groups.get(request.group_id)
        if (group is None or group.state is not S.AWAITING_SYNC or request.member_id != group.leader_id
                or request.generation != group.generation):
            return None
        return inputs_of(group, group.rebalance_protocol == RebalanceProtocol.COOPERATIVE)

    def heartbeat(self, request: pb.HeartbeatRequest, token: Token) -> list[Effect]:
        if request.group_id in self.consumer.groups:
            return self._classic_step(classic_heartbeat, request, token)
        return self._step(handle_heartbeat, request, token)

    def quick_heartbeat(self, request: pb.HeartbeatRequest) -> tuple[ArmTimer, pb.HeartbeatResponse] | None:
        """A current member's heartbeat in a Stable group: the session timer to arm and the answer
        (``membership.quick_heartbeat``); None: take ``heartbeat``, which answers every case."""
        return quick_heartbeat(self, request)

    def leave(self, request: pb.LeaveGroupRequest, token: Token) -> list[Effect]:
        if request.group_id in self.consumer.groups:
            return self._classic_step(classic_leave, request, token)
        return self._step(handle_leave, request, token)

    def report_load(self, request: pb.ReportLoadRequest, token: Token, checked: Verdict | None = None) -> list[Effect]:
        if request.group_id in self.consumer.groups:
            return self._classic_step(report_load, request, token, checked)
        return self._step(handle_report_load, request, token, checked)

    def list_groups(self, request: pb.ListGroupsRequest, token: Token) -> list[Effect]:
        return self._step(admin.list_groups, request, token, self.consumer.groups)

    def describe_group(self, request: pb.DescribeGroupRequest, token: Token) -> list[Effect]:
        return self._step(admin.describe_group, request, token, self.consumer.groups)

    def put_tasks(self, request: pb.PutTasksRequest, token: Token, checked: CatalogCheck | None = None,
                  principal: str = "") -> list[Effect]:
        return self._catalog_step(request.group_id, admin.put_tasks, request, token, checked, principal)

    def delete_tasks(self, request: pb.DeleteTasksRequest, token: Token) -> list[Effect]:
        return self._catalog_step(request.group_id, admin.delete_tasks, request, token)

    def publish_load_snapshot(self, request: pb.PublishLoadSnapshotRequest, token: Token,
                              checked: Verdict | None = None) -> list[Effect]:
        out = Outbox(self.consumer.to_record)
        admin.publish_load_snapshot(self, out, request, token, checked)
        self.rechecks.published(out, request.snapshot.group_id)
        return out.effects()

    def delete_group(self, request: pb.DeleteGroupRequest, token: Token, principal: str = "") -> list[Effect]:
        consumer = self.consumer.groups.get(request.group_id)
        if consumer is not None:
            return [Reply(token, "", pb.DeleteGroupResponse(error=error(
                pb.NON_EMPTY_GROUP, f"group {request.group_id!r} has {len(consumer.members)} consumer-protocol "
                "members")))]
        return self._step(admin.delete_group, request, token, principal)

    def _catalog_step(self, group_id: str, handler: Callable[..., None], *args: Any) -> list[Effect]:
        """A catalog edit; a consumer-protocol group's epoch moves with its catalog."""
        out = Outbox(self.consumer.to_record)
        handler(self, out, *args)
        self.consumer.catalog_changed(out, group_id)
        return out.effects()

    def fire(self, key: TimerKey) -> list[Effect]:
        """A timer's deadline passed (the runtime only fires keys the model armed)."""
        if key.kind == "expire" and key.group_id in self.consumer.groups:
            return []  # the catalog holder of a consumer-protocol group with members: not bare
        if key.kind in TIMER_KINDS or key.kind == SHED_TIMER:
            out = Outbox(self.consumer.to_record)
            self.rechecks.fire(out, key) if key.kind == SHED_TIMER else self.consumer.fire(out, key)
            return out.effects()
        group = self.groups.get(key.group_id)
        if group is None:
            return []
        return self._step(_TIMERS[key.kind], group, key.member_id)

    # ------------------------------------------------------------------ lifecycle

    def load(self, records: Mapping[str, dict[str, Any]]) -> list[Effect]:
        """Resume the stored groups (after a restart or on becoming active)."""
        out = Outbox(self.consumer.to_record)
        for group_id, record in records.items():
            self._resume(out, group_id, record)
        return out.effects()

    def unload(self, code: pb.ErrorCode, message: str) -> list[Effect]:
        """Stop answering for every group (lost the office): held requests get ``code``."""
        out = Outbox(self.consumer.to_record)
        for group in list(self.groups.values()):
            for member in group.members.values():
                phases.fail_held(out, group, member, code, message)
            self.drop_group(group)
        self.consumer.groups.clear()  # not persisted yet: their members join again wherever the group goes
        return out.effects()

    def release_parked(self, code: pb.ErrorCode, message: str) -> list[Effect]:
        """Answer every parked JoinGroup and SyncGroup with ``code`` (the server is stopping); the
        groups stay as they are (the store has them)."""
        out = Outbox(self.consumer.to_record)
        for group in self.groups.values():
            for member in group.members.values():
                phases.fail_held(out, group, member, code, message)
        return [e for e in out.effects() if isinstance(e, Reply)]

    def roll_back(self, group_id: str, record: dict[str, Any] | None) -> list[Effect]:
        """A write of ``group_id`` failed: put the group back as ``record`` (its last stored state;
        drop it if never stored), as a restart would: held requests fail with
        COORDINATOR_NOT_AVAILABLE (members retry), timers start afresh."""
        out = Outbox(self.consumer.to_record)
        group = self.groups.get(group_id)
        if group is not None:
            log.warning("group %s: store write failed: back to its last stored state", group_id,
                        extra={"event": "group_rolled_back", "group": group_id, "reason": "store write failed"})
            for member in group.members.values():
                phases.fail_held(out, group, member, pb.COORDINATOR_NOT_AVAILABLE,
                                 "the coordinator's store failed; retry")
                out.cancel(phases.session_key(group_id, member.member_id))
            for member_id in group.pending_members:  # handed out but never stored: they join afresh
                out.cancel(phases.pending_key(group_id, member_id))
            out.cancel(phases.join_key(group_id))
            out.cancel(phases.sync_key(group_id))
            self.consumer.groups.pop(group_id, None)  # back as stored too (``_resume``)
            self.drop_group(group)
        if record is not None:
            self._resume(out, group_id, record)
        return out.effects()

    def _resume(self, out: Outbox, group_id: str, record: dict[str, Any]) -> None:
        """Members keep their sessions (they go on heartbeating); a group caught mid-rebalance
        rebalances again, because its held requests were lost with the old process."""
        group = group_from_record(record)
        self._machine.add_model(group, initial=S.EMPTY)
        self.groups[group_id] = group
        if group.creator:
            self._created.setdefault(group.creator, set()).add(group_id)
        state = S(record.get("state", S.EMPTY.value))
        if state is S.STABLE:
            group.prepare_rebalance()
            group.complete_join()
            group.complete_sync()
        elif state in (S.PREPARING_REBALANCE, S.AWAITING_SYNC) and group.members:
            group.prepare_rebalance()
            out.arm(phases.join_key(group_id), group.rebalance_timeout_ms() / 1000)
        now = self.clock.now()
        for member in group.members.values():
            member.last_seen = now
            phases.arm_session(self, out, group, member)
        phases.expire_later(self, out, group)
        self.consumer.resume(out, group_id, record.get("consumer"), record.get("parts"))

    # ------------------------------------------------------------------ shared by the handlers

    def new_group(self, group_id: str, creator: str = "", founder: str = "") -> Group:
        group = Group(group_id, creator=creator, founder=founder if founder != creator else "")
        self._machine.add_model(group, initial=S.EMPTY)
        self.groups[group_id] = group
        if creator:
            self._created.setdefault(creator, set()).add(group_id)
        return group

    def drop_group(self, group: Group) -> None:
        group.mark_dead()
        self._machine.remove_model(group)
        del self.groups[group.group_id]
        created = self._created.get(group.creator)
        if created is not None:
            created.discard(group.group_id)
            if not created:
                del self._created[group.creator]

    def created_by(self, principal: str) -> set[str]:
        return self._created.get(principal, set())

    def check_group_id(self, group_id: str) -> pb.Error | None:
        limit = self.config.max_id_length
        if not group_id:
            return error(pb.INVALID_GROUP_ID, "group id must not be empty")
        if len(group_id) > limit or not group_id.isprintable() or "/" in group_id:
            return error(pb.INVALID_GROUP_ID, f"group id must be printable, without '/', at most {limit} chars "
                         f"(max_id_length)")
        return None

    def find_member(
        self, group_id: str, member_id: str, generation: int | None, instance_id: str = ""
    ) -> tuple[Group | None, Member | None, pb.Error | None]:
        """The group and member a request names, or the error that answers it. The ids are checked
        only when they name nothing: a group or member that exists was checked when it was made
        (every heartbeat takes this path: no length checks on it)."""
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members or instance_id:
            failure = (self.check_group_id(group_id)
                       or limits.check_id(self.config, "member_id", member_id, member_id=True)
                       or limits.check_id(self.config, "instance_id", instance_id))
            if failure is not None:
                return None, None, failure
        if group is None:
            return None, None, error(pb.UNKNOWN_MEMBER_ID, f"group {group_id!r} does not exist")
        if group.state is S.DEAD:
            return group, None, error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
        failure = self.check_member(group, member_id, instance_id)
        if failure is not None:
            return group, None, failure
        member = group.members[member_id]
        if generation is not None and generation != group.generation:
            return group, member, error(
                pb.ILLEGAL_GENERATION, f"generation {generation} is not the current {group.generation}"
            )
        return group, member, None

    def member_principal(self, group_id: str, member_id: str, instance_id: str = "") -> str | None:
        """Who joined the member a request names (by instance id first, as the join does), or None
        when there is no such member (the request will get its protocol error)."""
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            if instance_id and instance_id in consumer.static_members:
                member_id = consumer.static_members[instance_id]
            found = consumer.members.get(member_id)
            return None if found is None else found.principal
        group = self.groups.get(group_id)
        if group is None:
            return None
        if instance_id and instance_id in group.static_members:
            member_id = group.static_members[instance_id]
        member = group.members.get(member_id)
        return None if member is None else member.principal

    @staticmethod
    def check_member(group: Group, member_id: str, instance_id: str) -> pb.Error | None:
        """Kafka's validateCurrentMember: an instance id must name this member id (else the caller
        is an older process of that instance: FENCED_INSTANCE_ID), and the member must exist."""
        if instance_id:
            current = group.static_members.get(instance_id)
            if current is None:
                return error(pb.UNKNOWN_MEMBER_ID, f"instance {instance_id!r} is not in group {group.group_id!r}")
            if current != member_id:
                return error(pb.FENCED_INSTANCE_ID,
                             f"instance {instance_id!r} is member {current} now; {member_id!r} is fenced")
        if member_id not in group.members:
            return error(pb.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}")
        return None

    def member_count(self) -> int:
        """Members of every group, either protocol (a consumer group's classic entry holds none of them)."""
        return sum(len(g.members) for g in self.groups.values()) + sum(
            len(g.members) for g in self.consumer.groups.values())

    def validate(self) -> None:
        """Every group's invariants (tests run this after each step)."""
        for group in self.groups.values():
            group.validate()
        self.consumer.validate()
