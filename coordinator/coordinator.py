"""The group coordinator: Kafka's classic group protocol over a pure, single-threaded model.

Requests come in as protobuf messages; answers go out through a ``reply``
callable (called exactly once, maybe later: JoinGroup and SyncGroup are held
until the phase completes). Nothing here does network I/O or reads the real
clock: the gRPC servicer calls these methods from one thread (its event loop)
and runs ``timers.poll()`` at each deadline; tests drive a ``FakeClock``.
Every change the coordinator acknowledges is written to the store before the
reply goes out.

Timer keys: ``join/<g>`` (join phase), ``sync/<g>`` (members that never sync),
``session/<g>/<m>`` (member liveness), ``pending/<g>/<m>`` (ids handed out with
MEMBER_ID_REQUIRED and never used).

A store write that fails (other than fenced) puts the group back as it was
last stored, so memory never runs ahead of the store (see ``_persist``).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, Iterable, Sequence

from coordinator.clock import Clock, SystemClock
from coordinator.config import CoordinatorConfig
from coordinator.group import Group, Member, Reply
from coordinator.records import group_from_record, group_to_record
from coordinator.states import GroupState, new_machine
from coordinator.store import FencedError, GroupRecord, GroupStore, MemoryStore, StoreError
from coordinator.timers import TimerQueue
from coordinator.validation import AssignmentRejected, apply_splits, replicas_of, validate_assignment
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["GroupCoordinator"]

log = logging.getLogger("groupcoord.coordinator")

S = GroupState
_MAX_GROUP_ID = 255


def _error(code: int, message: str = "", hint: str = "") -> pb.Error:
    return pb.Error(code=code, message=message or pb.ErrorCode.Name(code), coordinator_hint=hint)


def _check_group_id(group_id: str) -> pb.Error | None:
    if not group_id:
        return _error(pb.INVALID_GROUP_ID, "group id must not be empty")
    if len(group_id) > _MAX_GROUP_ID or not group_id.isprintable() or "/" in group_id:
        return _error(pb.INVALID_GROUP_ID, f"group id must be printable, without '/', at most {_MAX_GROUP_ID} chars")
    return None


class GroupCoordinator:
    """Every group this process coordinates, their timers and their store."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        clock: Clock | None = None,
        store: GroupStore | None = None,
        on_change: Callable[[Group], None] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.clock = clock or SystemClock()
        self.timers = TimerQueue(self.clock)
        self.store = store or MemoryStore()
        self.groups: dict[str, Group] = {}
        self._stored: dict[str, GroupRecord] = {}  # each group's record as last written or loaded
        self._machine = new_machine()
        self._on_change = on_change or (lambda group: None)
        # Whether this process may answer for groups; HA flips it (standbys answer NOT_COORDINATOR).
        self.active = True
        # HA: the election's verdict, asked on every request and before timers fire (None: standalone)
        self.office_check: Callable[[], bool] | None = None
        self.active_hint = ""
        self.loading = False
        self.on_load_report: Callable[[str, str, pb.LoadReport], None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> int:
        """Resume every stored group (after a restart or on becoming active); returns how many."""
        for group_id, record in self.store.load_all().items():
            self._resume(group_id, record)
        return len(self.groups)

    def _resume(self, group_id: str, record: GroupRecord) -> Group:
        """The group as ``record`` has it, in memory with fresh timers."""
        group = group_from_record(record)
        self._machine.add_model(group, initial=S.EMPTY)
        self._restore_state(group, S(record.get("state", S.EMPTY.value)))
        self.groups[group_id] = group
        self._stored[group_id] = record
        return group

    def _restore_state(self, group: Group, state: GroupState) -> None:
        """Members keep their sessions (they go on heartbeating); a group caught mid-rebalance
        rebalances again, because its held requests were lost with the old process."""
        if state is S.STABLE:
            group.prepare_rebalance()
            group.complete_join()
            group.complete_sync()
        elif state in (S.PREPARING_REBALANCE, S.AWAITING_SYNC) and group.members:
            group.prepare_rebalance()
            self._schedule_join_timer(group, group.rebalance_timeout_ms())
        for member in group.members.values():
            member.last_seen = self.clock.now()
            self._schedule_session(group, member)

    def unload(self, hint: str = "") -> None:
        """Stop answering for every group (lost leadership): held requests get NOT_COORDINATOR."""
        self.active = False
        self.active_hint = hint
        for group in list(self.groups.values()):
            for member in group.members.values():
                self._fail_held(member, pb.NOT_COORDINATOR, "this coordinator is no longer active")
            group.mark_dead()
            self._machine.remove_model(group)
        self.groups.clear()
        self._stored.clear()
        self.timers.clear()

    def in_office(self) -> bool:
        """Whether this process is the active coordinator, per ``active`` and the election.

        ``active`` alone lags: the election's "lost" callback reaches the loop only after requests and
        timers already queued there (e.g. right after a SIGSTOP ends), so ask the election directly
        and stand down at once if it says no."""
        if not self.active:
            return False
        if self.office_check is not None and not self.office_check():
            log.warning("the election says our term is over: this process stops acting as the active coordinator")
            self.unload("")
            return False
        return True

    def _not_active(self) -> pb.Error | None:
        if self.loading:
            return _error(pb.COORDINATOR_LOAD_IN_PROGRESS, "loading groups, retry shortly")
        if not self.in_office():
            return _error(pb.NOT_COORDINATOR, "this coordinator is a standby", self.active_hint)
        return None

    def _new_group(self, group_id: str) -> Group:
        group = Group(group_id)
        self._machine.add_model(group, initial=S.EMPTY)
        self.groups[group_id] = group
        return group

    def _persist(self, group: Group, unsent: Sequence[tuple[Reply, Any]] = ()) -> None:
        """Write the group's record before anybody hears of the change.

        If the store refuses, memory must not run ahead of it: a fenced write ends our term (the caller
        unloads every group); any other failure (disk full, ZooKeeper unreachable) puts the group back
        as last stored, then re-raises so the request fails. ``unsent`` are the held requests this
        change already took off their members (reply, response type): nobody else would answer them.
        """
        record = group_to_record(group)
        try:
            self.store.save(group.group_id, record)
        except StoreError as error:
            fenced = isinstance(error, FencedError)
            failure = _error(pb.NOT_COORDINATOR if fenced else pb.COORDINATOR_NOT_AVAILABLE,
                             f"the coordinator's store failed: {error}")
            for reply, response_type in unsent:
                reply(response_type(error=failure, generation=-1))
            if not fenced:
                self._roll_back(group)
            raise
        self._stored[group.group_id] = record
        self._on_change(group)

    def _roll_back(self, group: Group) -> None:
        """Replace ``group`` by its last stored record (drop it if never stored), as a restart would:
        its held requests fail with COORDINATOR_NOT_AVAILABLE (the members retry), its timers restart."""
        log.warning("group %s: store write failed: back to its last stored state", group.group_id)
        for member in group.members.values():
            self._fail_held(member, pb.COORDINATOR_NOT_AVAILABLE, "the coordinator's store failed; retry")
            self.timers.cancel(f"session/{group.group_id}/{member.member_id}")
        for member_id in group.pending_members:  # handed out but never stored: they join afresh
            self.timers.cancel(f"pending/{group.group_id}/{member_id}")
        self.timers.cancel(f"join/{group.group_id}")
        self.timers.cancel(f"sync/{group.group_id}")
        group.mark_dead()
        self._machine.remove_model(group)
        del self.groups[group.group_id]
        record = self._stored.get(group.group_id)
        if record is not None:
            self._resume(group.group_id, record)

    # ------------------------------------------------------------------ JoinGroup

    def join_group(self, request: pb.JoinGroupRequest, reply: Reply, *, host: str = "") -> None:
        def fail(code: int, message: str = "", member_id: str = "") -> None:
            reply(pb.JoinGroupResponse(error=_error(code, message), member_id=member_id, generation=-1))

        error = self._not_active() or _check_group_id(request.group_id)
        if error is not None:
            reply(pb.JoinGroupResponse(error=error, generation=-1))
            return
        cfg = self.config
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
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                fail(pb.UNKNOWN_MEMBER_ID, f"group {request.group_id!r} does not exist (any more)")
                return
            group = self._new_group(request.group_id)
        if group.state is S.DEAD:
            fail(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
            return
        if not request.member_id:
            self._join_new_member(group, request, fail)
        elif request.member_id in group.pending_members:
            self._join_pending_member(group, request, reply, host)
        elif request.member_id not in group.members:
            fail(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group {group.group_id!r}")
        else:
            self._join_known_member(group, group.members[request.member_id], request, reply, fail)

    def _join_new_member(self, group: Group, request: pb.JoinGroupRequest, fail: Callable[..., None]) -> None:
        if not group.supports_protocols(tuple(request.protocols)):
            fail(pb.INCONSISTENT_GROUP_PROTOCOL, self._protocol_mismatch(group, request.protocols))
            return
        if group.size() >= self.config.group_max_size:
            fail(pb.GROUP_MAX_SIZE_REACHED, f"group {group.group_id!r} has {self.config.group_max_size} members")
            return
        prefix = request.client_id or "member"
        member_id = f"{prefix}-{uuid.uuid4()}"
        group.pending_members.add(member_id)
        self.timers.schedule(
            f"pending/{group.group_id}/{member_id}",
            request.session_timeout_ms / 1000,
            lambda: self._expire_pending(group, member_id),
        )
        fail(pb.MEMBER_ID_REQUIRED, "join again with the member id given", member_id)

    @staticmethod
    def _protocol_mismatch(group: Group, offered: Iterable[str]) -> str:
        common = sorted(group.candidate_protocols())
        return f"member offers {sorted(offered)} but the group's members all support only {common}"

    def _join_pending_member(self, group: Group, request: pb.JoinGroupRequest, reply: Reply, host: str) -> None:
        if not group.supports_protocols(tuple(request.protocols)):
            reply(pb.JoinGroupResponse(
                error=_error(pb.INCONSISTENT_GROUP_PROTOCOL, self._protocol_mismatch(group, request.protocols)),
                generation=-1,
            ))
            return
        group.pending_members.discard(request.member_id)
        self.timers.cancel(f"pending/{group.group_id}/{request.member_id}")
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
            join_reply=reply,
            last_seen=self.clock.now(),
        )
        group.members[member.member_id] = member
        self._schedule_session(group, member)
        log.info("group %s: member %s joined (%s)", group.group_id, member.member_id, host or "?")
        if group.state is S.PREPARING_REBALANCE:
            if group.in_initial_delay:
                group.new_member_during_delay = True
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {member.member_id} joined")

    def _join_known_member(
        self,
        group: Group,
        member: Member,
        request: pb.JoinGroupRequest,
        reply: Reply,
        fail: Callable[..., None],
    ) -> None:
        protocols = tuple(request.protocols)
        if protocols != member.protocols:  # only a change can break agreement (keeps re-joins O(1))
            others = Group(group.group_id, members={k: v for k, v in group.members.items() if k != member.member_id})
            if not others.supports_protocols(protocols):
                fail(pb.INCONSISTENT_GROUP_PROTOCOL, self._protocol_mismatch(others, protocols))
                return
        member.last_seen = self.clock.now()
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member(member, request)
            if member.join_reply is not None:
                member.join_reply(pb.JoinGroupResponse(
                    error=_error(pb.REBALANCE_IN_PROGRESS, "superseded by a newer JoinGroup of the same member"),
                    generation=-1,
                ))
            member.join_reply = reply
            self._maybe_complete_join(group)
        elif state is S.AWAITING_SYNC:
            if member.same_join(protocols, request.metadata):
                # The member lost our JoinGroup response: send it again for the current generation.
                reply(self._join_response(group, member))
            else:
                self._update_member(member, request)
                member.join_reply = reply
                self._prepare_rebalance(group, f"member {member.member_id} re-joined with new metadata")
        elif state is S.STABLE:
            if member.member_id != group.leader_id and member.same_join(protocols, request.metadata):
                reply(self._join_response(group, member))
            else:
                self._update_member(member, request)
                member.join_reply = reply
                who = "leader" if member.member_id == group.leader_id else "member"
                self._prepare_rebalance(group, f"{who} {member.member_id} re-joined")
        else:  # Empty has no members; Dead was handled by the caller
            fail(pb.UNKNOWN_MEMBER_ID, f"member {member.member_id!r} is not in group {group.group_id!r}")

    def _update_member(self, member: Member, request: pb.JoinGroupRequest) -> None:
        member.protocols = tuple(request.protocols)
        member.metadata = request.metadata
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
        if request.instance_id:
            member.instance_id = request.instance_id

    def _join_response(self, group: Group, member: Member) -> pb.JoinGroupResponse:
        response = pb.JoinGroupResponse(
            error=_error(pb.NONE, "NONE"),
            generation=group.generation,
            protocol=group.protocol,
            leader_id=group.leader_id,
            member_id=member.member_id,
        )
        if member.member_id == group.leader_id:
            response.members.extend(m.to_pb() for m in group.members.values())
            response.tasks.extend(group.tasks[t] for t in sorted(group.tasks))
            if group.load_snapshot is not None:
                response.load_snapshot.CopyFrom(group.load_snapshot)
        return response

    # ------------------------------------------------------------------ rebalance phases

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is S.AWAITING_SYNC:
            self.timers.cancel(f"sync/{group.group_id}")
            group.pending_sync.clear()
            for member in group.members.values():
                if member.sync_reply is not None:
                    reply, member.sync_reply = member.sync_reply, None
                    reply(pb.SyncGroupResponse(error=_error(pb.REBALANCE_IN_PROGRESS, reason), generation=-1))
        was_empty = group.state is S.EMPTY
        group.prepare_rebalance()
        delay_ms = self.config.group_initial_rebalance_delay_ms
        if was_empty and delay_ms > 0:
            group.in_initial_delay = True
            group.new_member_during_delay = False
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            self._schedule_join_timer(group, delay_ms)
        else:
            group.in_initial_delay = False
            self._schedule_join_timer(group, group.rebalance_timeout_ms())
        log.info("group %s: preparing rebalance (generation %d): %s", group.group_id, group.generation, reason)
        self._persist(group)
        self._maybe_complete_join(group)

    def _schedule_join_timer(self, group: Group, delay_ms: int) -> None:
        self.timers.schedule(f"join/{group.group_id}", delay_ms / 1000, lambda: self._on_join_timer(group))

    def _on_join_timer(self, group: Group) -> None:
        if group.state is not S.PREPARING_REBALANCE:
            return
        if group.in_initial_delay and group.new_member_during_delay and group.initial_delay_remaining_ms > 0:
            # Kafka's InitialDelayedJoin: members keep arriving, wait one more delay (bounded).
            delay = min(self.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms -= delay
            group.new_member_during_delay = False
            self._schedule_join_timer(group, delay)
            return
        self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is S.PREPARING_REBALANCE and not group.in_initial_delay and group.all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        self.timers.cancel(f"join/{group.group_id}")
        group.in_initial_delay = False
        for member in [m for m in group.members.values() if m.join_reply is None]:
            log.info("group %s: removing %s, which did not re-join in time", group.group_id, member.member_id)
            self._drop_member(group, member)
        group.generation += 1
        group.assignment = {}
        group.unassigned = []
        if not group.members:
            group.protocol = ""
            group.leader_id = ""
            group.become_empty()
            log.info("group %s: empty at generation %d", group.group_id, group.generation)
            self._persist(group)
            return
        group.protocol = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        replies: list[tuple[Member, Reply]] = []
        for member in group.members.values():
            assert member.join_reply is not None
            replies.append((member, member.join_reply))
            member.join_reply = None
            member.last_seen = self.clock.now()
            self._schedule_session(group, member)
        group.complete_join()
        group.pending_sync = set(group.members)
        self.timers.schedule(
            f"sync/{group.group_id}", group.rebalance_timeout_ms() / 1000, lambda: self._on_sync_timeout(group)
        )
        self._persist(group, [(reply, pb.JoinGroupResponse) for _, reply in replies])  # durable before anyone hears
        log.info(
            "group %s: generation %d with %d member(s), leader %s, assignor %s",
            group.group_id, group.generation, len(group.members), group.leader_id, group.protocol,
        )
        for member, reply in replies:
            reply(self._join_response(group, member))

    def _on_sync_timeout(self, group: Group) -> None:
        if group.state is not S.AWAITING_SYNC or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._drop_member(group, member)
        self._after_member_removed(group, f"member(s) {', '.join(missing)} did not send SyncGroup in time")

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(self, request: pb.SyncGroupRequest, reply: Reply) -> None:
        def fail(code: int, message: str = "") -> None:
            reply(pb.SyncGroupResponse(error=_error(code, message), generation=-1))

        error = self._not_active() or _check_group_id(request.group_id)
        if error is not None:
            reply(pb.SyncGroupResponse(error=error, generation=-1))
            return
        group = self.groups.get(request.group_id)
        if group is None:
            fail(pb.UNKNOWN_MEMBER_ID, f"group {request.group_id!r} does not exist")
            return
        if group.state is S.DEAD:
            fail(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
            return
        member = group.members.get(request.member_id)
        if member is None:
            fail(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group {group.group_id!r}")
            return
        if request.generation != group.generation:
            fail(pb.ILLEGAL_GENERATION, f"generation {request.generation} is not the current {group.generation}")
            return
        member.last_seen = self.clock.now()
        if group.state is S.PREPARING_REBALANCE:
            fail(pb.REBALANCE_IN_PROGRESS, "the group is rebalancing: join again")
        elif group.state is S.STABLE:
            reply(self._sync_response(group, member.member_id))
        elif group.state is S.AWAITING_SYNC:
            if member.sync_reply is not None:
                old, member.sync_reply = member.sync_reply, None
                old(pb.SyncGroupResponse(error=_error(pb.REBALANCE_IN_PROGRESS, "superseded"), generation=-1))
            member.sync_reply = reply
            group.pending_sync.discard(member.member_id)
            self._schedule_session(group, member)
            if member.member_id == group.leader_id:
                self._accept_leader_sync(group, request)
        else:
            fail(pb.UNKNOWN_MEMBER_ID, f"member {request.member_id!r} is not in group {group.group_id!r}")

    def _accept_leader_sync(self, group: Group, request: pb.SyncGroupRequest) -> None:
        try:
            if request.assignor_error:
                raise AssignmentRejected(f"the leader's assignor failed: {request.assignor_error}")
            tasks = apply_splits(group.tasks, request.splits)
            pools = {m.member_id: m.metadata.pool for m in group.members.values()}
            validate_assignment(pools, tasks, request.assignments, request.unassigned)
        except AssignmentRejected as rejected:
            reason = str(rejected)
            log.warning("group %s: generation %d: invalid assignment: %s", group.group_id, group.generation, reason)
            group.last_error = f"generation {group.generation}: {reason}"
            leader = group.members[group.leader_id]
            reply, leader.sync_reply = leader.sync_reply, None
            assert reply is not None
            self._prepare_rebalance(group, f"invalid assignment from the leader: {reason}")
            reply(pb.SyncGroupResponse(error=_error(pb.INVALID_ASSIGNMENT, reason), generation=-1))
            return
        if request.splits:
            group.tasks = tasks
            group.catalog_version += 1
        group.assignment = {a.member_id: list(a.tasks) for a in request.assignments}
        for member_id in group.members:
            group.assignment.setdefault(member_id, [])
        group.unassigned = list(request.unassigned)
        group.last_error = ""
        self.timers.cancel(f"sync/{group.group_id}")
        group.pending_sync.clear()
        replies: list[tuple[Member, Reply]] = []
        for member in group.members.values():
            if member.sync_reply is not None:
                replies.append((member, member.sync_reply))
                member.sync_reply = None
        group.complete_sync()
        self._persist(group, [(reply, pb.SyncGroupResponse) for _, reply in replies])  # durable before tasks start
        log.info(
            "group %s: generation %d stable: %d replica(s) over %d member(s), %d unassigned",
            group.group_id, group.generation, sum(len(v) for v in group.assignment.values()),
            len(group.members), len(group.unassigned),
        )
        for member, reply in replies:
            reply(self._sync_response(group, member.member_id))

    def _sync_response(self, group: Group, member_id: str) -> pb.SyncGroupResponse:
        return pb.SyncGroupResponse(
            error=_error(pb.NONE, "NONE"),
            generation=group.generation,
            protocol=group.protocol,
            tasks=group.assignment.get(member_id, []),
        )

    # ------------------------------------------------------------------ Heartbeat / Leave / ReportLoad

    def _check_member(
        self, group_id: str, member_id: str, generation: int | None
    ) -> tuple[Group | None, Member | None, pb.Error | None]:
        error = self._not_active() or _check_group_id(group_id)
        if error is not None:
            return None, None, error
        group = self.groups.get(group_id)
        if group is None:
            return None, None, _error(pb.UNKNOWN_MEMBER_ID, f"group {group_id!r} does not exist")
        if group.state is S.DEAD:
            return group, None, _error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")
        member = group.members.get(member_id)
        if member is None:
            return group, None, _error(pb.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        if generation is not None and generation != group.generation:
            return group, member, _error(
                pb.ILLEGAL_GENERATION, f"generation {generation} is not the current {group.generation}"
            )
        return group, member, None

    def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        group, member, error = self._check_member(request.group_id, request.member_id, request.generation)
        if error is not None:
            return pb.HeartbeatResponse(error=error)
        assert group is not None and member is not None
        member.last_seen = self.clock.now()
        self._schedule_session(group, member)
        if group.state is S.STABLE:
            return pb.HeartbeatResponse()
        return pb.HeartbeatResponse(error=_error(pb.REBALANCE_IN_PROGRESS, "the group is rebalancing: join again"))

    def leave_group(self, request: pb.LeaveGroupRequest) -> pb.LeaveGroupResponse:
        error = self._not_active() or _check_group_id(request.group_id)
        if error is not None:
            return pb.LeaveGroupResponse(error=error)
        group = self.groups.get(request.group_id)
        if group is not None and request.member_id in group.pending_members:
            group.pending_members.discard(request.member_id)
            self.timers.cancel(f"pending/{group.group_id}/{request.member_id}")
            self._maybe_complete_join(group)
            return pb.LeaveGroupResponse()
        group, member, error = self._check_member(request.group_id, request.member_id, None)
        if error is not None:
            return pb.LeaveGroupResponse(error=error)
        assert group is not None and member is not None
        log.info("group %s: member %s left", group.group_id, member.member_id)
        self._fail_held(member, pb.UNKNOWN_MEMBER_ID, "the member left the group")
        self._drop_member(group, member)
        self._after_member_removed(group, f"member {member.member_id} left")
        return pb.LeaveGroupResponse()

    def report_load(self, request: pb.ReportLoadRequest) -> pb.ReportLoadResponse:
        group, member, error = self._check_member(request.group_id, request.member_id, None)
        if error is not None:
            return pb.ReportLoadResponse(error=error)
        assert member is not None
        if not request.HasField("report"):
            return pb.ReportLoadResponse(error=_error(pb.INVALID_REQUEST, "report is missing"))
        member.last_seen = self.clock.now()
        if self.on_load_report is not None:
            self.on_load_report(request.group_id, request.member_id, request.report)
        return pb.ReportLoadResponse()

    # ------------------------------------------------------------------ membership changes

    def _schedule_session(self, group: Group, member: Member) -> None:
        self.timers.schedule(
            f"session/{group.group_id}/{member.member_id}",
            member.session_timeout_ms / 1000,
            lambda: self._on_session_expired(group, member),
        )

    def _on_session_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.is_awaiting:
            self._schedule_session(group, member)  # parked in Join/Sync: alive by definition
            return
        log.info("group %s: session of %s expired", group.group_id, member.member_id)
        self._drop_member(group, member)
        self._after_member_removed(group, f"session of member {member.member_id} expired")

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            log.info("group %s: pending member %s never joined", group.group_id, member_id)
            self._maybe_complete_join(group)
            if group.state is S.EMPTY and not group.members and not group.pending_members:
                self._persist(group)

    def _drop_member(self, group: Group, member: Member) -> None:
        del group.members[member.member_id]
        group.pending_sync.discard(member.member_id)
        group.assignment.pop(member.member_id, None)
        self.timers.cancel(f"session/{group.group_id}/{member.member_id}")
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), "")

    def _after_member_removed(self, group: Group, reason: str) -> None:
        if group.state in (S.STABLE, S.AWAITING_SYNC):
            self._prepare_rebalance(group, reason)
        elif group.state is S.PREPARING_REBALANCE:
            if not group.members:
                self._complete_join(group)
            else:
                self._persist(group)
                self._maybe_complete_join(group)

    def _fail_held(self, member: Member, code: int, message: str) -> None:
        if member.join_reply is not None:
            reply, member.join_reply = member.join_reply, None
            reply(pb.JoinGroupResponse(error=_error(code, message), generation=-1))
        if member.sync_reply is not None:
            reply, member.sync_reply = member.sync_reply, None
            reply(pb.SyncGroupResponse(error=_error(code, message), generation=-1))

    # ------------------------------------------------------------------ admin

    def list_groups(self) -> pb.ListGroupsResponse:
        error = self._not_active()
        if error is not None:
            return pb.ListGroupsResponse(error=error)
        return pb.ListGroupsResponse(groups=[
            pb.GroupListing(
                group_id=g.group_id,
                state=_STATE_PB[g.state],
                generation=g.generation,
                num_members=len(g.members),
                protocol=g.protocol,
            )
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
        ])

    def describe_group(self, group_id: str, *, include_load_snapshot: bool = False) -> pb.DescribeGroupResponse:
        error = self._not_active() or _check_group_id(group_id)
        if error is not None:
            return pb.DescribeGroupResponse(error=error)
        group = self.groups.get(group_id)
        if group is None:
            return pb.DescribeGroupResponse(error=_error(pb.GROUP_ID_NOT_FOUND, f"no group {group_id!r}"))
        now = self.clock.now()
        response = pb.DescribeGroupResponse(
            group_id=group.group_id,
            state=_STATE_PB[group.state],
            generation=group.generation,
            protocol=group.protocol,
            leader_id=group.leader_id,
            members=[
                pb.DescribedMember(
                    member=m.to_pb(),
                    assigned=group.assignment.get(m.member_id, []),
                    last_seen_ms_ago=int(max(0.0, now - m.last_seen) * 1000),
                )
                for m in group.members.values()
            ],
            tasks=[group.tasks[t] for t in sorted(group.tasks)],
            unassigned=group.unassigned,
            last_error=group.last_error,
        )
        if group.load_snapshot is not None and include_load_snapshot:
            response.load_snapshot.CopyFrom(group.load_snapshot)
        elif group.load_snapshot is not None:
            snap = group.load_snapshot
            response.load_snapshot.CopyFrom(pb.LoadSnapshot(
                group_id=snap.group_id, snapshot_id=snap.snapshot_id, created_ms=snap.created_ms,
                workers=snap.workers,
            ))
        return response

    def put_tasks(self, request: pb.PutTasksRequest) -> pb.PutTasksResponse:
        error = self._not_active() or _check_group_id(request.group_id)
        if error is not None:
            return pb.PutTasksResponse(error=error)
        if len(request.tasks) > self.config.max_tasks_per_request:
            return pb.PutTasksResponse(error=_error(
                pb.INVALID_REQUEST, f"{len(request.tasks)} tasks; at most {self.config.max_tasks_per_request}"))
        seen: set[str] = set()
        for task in request.tasks:
            if not task.task_id or not task.task_id.isprintable():
                return pb.PutTasksResponse(error=_error(pb.INVALID_REQUEST, "task ids must be non-empty, printable"))
            if task.task_id in seen:
                return pb.PutTasksResponse(error=_error(pb.DUPLICATE_TASK, f"task {task.task_id!r} given twice"))
            seen.add(task.task_id)
            if not 0 <= task.replicas <= self.config.max_replicas:
                return pb.PutTasksResponse(error=_error(
                    pb.INVALID_REQUEST,
                    f"task {task.task_id!r}: replicas must be in [1, {self.config.max_replicas}]"))
            if not task.weight >= 0 or task.weight == float("inf"):
                return pb.PutTasksResponse(error=_error(
                    pb.INVALID_REQUEST, f"task {task.task_id!r}: weight must be a finite number >= 0"))
        group = self.groups.get(request.group_id) or self._new_group(request.group_id)
        if group.state is S.DEAD:
            return pb.PutTasksResponse(error=_error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed"))
        changed = False
        for task in request.tasks:
            normalised = pb.Task()
            normalised.CopyFrom(task)
            normalised.replicas = replicas_of(task)
            if group.tasks.get(task.task_id) != normalised:
                group.tasks[task.task_id] = normalised
                changed = True
        if changed:
            self._catalog_changed(group)
        return pb.PutTasksResponse(num_tasks=len(group.tasks))

    def delete_tasks(self, request: pb.DeleteTasksRequest) -> pb.DeleteTasksResponse:
        error = self._not_active() or _check_group_id(request.group_id)
        if error is not None:
            return pb.DeleteTasksResponse(error=error)
        group = self.groups.get(request.group_id)
        if group is None:
            return pb.DeleteTasksResponse(error=_error(pb.GROUP_ID_NOT_FOUND, f"no group {request.group_id!r}"))
        ids = list(request.task_ids)
        if len(set(ids)) != len(ids):
            return pb.DeleteTasksResponse(error=_error(pb.DUPLICATE_TASK, "a task id is given twice"))
        unknown = [t for t in ids if t not in group.tasks]
        if unknown:
            return pb.DeleteTasksResponse(error=_error(pb.UNKNOWN_TASK, f"unknown task(s): {', '.join(unknown)}"))
        for task_id in ids:
            del group.tasks[task_id]
        if ids:
            self._catalog_changed(group)
        return pb.DeleteTasksResponse(num_tasks=len(group.tasks))

    def _catalog_changed(self, group: Group) -> None:
        group.catalog_version += 1
        if group.state in (S.STABLE, S.AWAITING_SYNC):
            self._prepare_rebalance(group, "task catalog changed")
        else:
            self._persist(group)

    def publish_load_snapshot(self, request: pb.PublishLoadSnapshotRequest) -> pb.PublishLoadSnapshotResponse:
        error = self._not_active() or _check_group_id(request.snapshot.group_id)
        if error is not None:
            return pb.PublishLoadSnapshotResponse(error=error)
        group = self.groups.get(request.snapshot.group_id)
        if group is None:
            return pb.PublishLoadSnapshotResponse(
                error=_error(pb.GROUP_ID_NOT_FOUND, f"no group {request.snapshot.group_id!r}"))
        current = group.load_snapshot
        if current is not None and request.snapshot.created_ms < current.created_ms:
            return pb.PublishLoadSnapshotResponse()  # an older snapshot never replaces a newer one
        group.load_snapshot = request.snapshot
        self._persist(group)
        return pb.PublishLoadSnapshotResponse()

    def delete_group(self, request: pb.DeleteGroupRequest) -> pb.DeleteGroupResponse:
        error = self._not_active() or _check_group_id(request.group_id)
        if error is not None:
            return pb.DeleteGroupResponse(error=error)
        group = self.groups.get(request.group_id)
        if group is None:
            return pb.DeleteGroupResponse(error=_error(pb.GROUP_ID_NOT_FOUND, f"no group {request.group_id!r}"))
        if group.state is not S.EMPTY or group.pending_members:
            return pb.DeleteGroupResponse(error=_error(
                pb.NON_EMPTY_GROUP, f"group {request.group_id!r} is {group.state.value}; it must be Empty"))
        self.store.delete(group.group_id)  # first: if it fails, nothing changed
        group.mark_dead()
        self._machine.remove_model(group)
        del self.groups[group.group_id]
        self._stored.pop(group.group_id, None)
        return pb.DeleteGroupResponse()


_STATE_PB = {
    S.EMPTY: pb.EMPTY,
    S.PREPARING_REBALANCE: pb.PREPARING_REBALANCE,
    S.AWAITING_SYNC: pb.AWAITING_SYNC,
    S.STABLE: pb.STABLE,
    S.DEAD: pb.DEAD,
}
