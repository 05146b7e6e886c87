"""The data of one group and its members (behaviour lives in the handlers of ``coordinator.model.model``).

A group is a ``transitions`` model: its ``state`` attribute is owned by the
machine of ``coordinator.model.states`` and only changes through its triggers.

Every per-request question about the whole group (do all members support this assignor? has
everyone re-joined?) is answered from running counts, as Kafka's ``ClassicGroup`` keeps
``supportedProtocols`` and ``numMembersAwaitingJoin``: a join into a group of 10,000 costs what
a join into a group of 10 does. The counts change only through ``Group`` (``add``, ``remove``,
``hold_join``, ``take_join``, ``set_protocols``), and ``validate`` checks them against a recount.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot, b64
from groupcoord.coordinator.model.effects import Token
from groupcoord.coordinator.model.pending import PendingIds
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

GROUP_MEMBER_OVERHEAD = 32  # field tags and lengths of one GroupMember entry, generously


def entry_bytes(metadata_bytes: int, *ids: str) -> int:
    """What one member's entry in the leader's JoinGroup answer takes: its metadata and its ids (bytes)."""
    return metadata_bytes + sum(map(len, ids)) + GROUP_MEMBER_OVERHEAD

__all__ = ["Member", "Group", "PendingIds", "entry_bytes"]


@dataclass(eq=False)
class Member:
    member_id: str
    group_id: str
    client_id: str
    instance_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[str, ...]  # changed only through ``Group.set_protocols`` (it keeps the counts)
    metadata: pb.MemberMetadata
    protocol_type: str = ""
    rebalance_protocols: tuple[str, ...] = ()  # as offered on the wire: RebalanceProtocol values (KIP-429)
    # a JoinGroup held until the join phase completes; set and cleared only through
    # ``Group.hold_join`` / ``Group.take_join``, which keep the group's count of held joins
    join_token: Token | None = None
    sync_token: Token | None = None  # a SyncGroup held until the leader's assignment arrives
    last_seen: float = 0.0
    # KIP-394: joined in this phase and not yet answered; its parked JoinGroup expires after
    # the new-member join timeout (it has no member id to heartbeat with)
    is_new: bool = False
    # a static member whose session expired, kept (with its tasks) for the departed-member grace
    departed: bool = False
    # the coordinator's lost time (``Model.lateness``) when the member was last heard from
    lost_mark: float = 0.0
    # who joined it (``coordinator.auth``, e.g. "User:CN=worker-1"): only it (or an admin) may act for
    # the member; "" for members joined without authentication or stored before principals were kept
    principal: str = ""
    # what this member adds to the leader's JoinGroup answer (bytes); kept by ``Group``
    entry_bytes: int = 0
    # ``metadata`` and its form in the group's record (``record_metadata``); stale once ``metadata`` is another message
    _recorded: tuple[pb.MemberMetadata, str] | None = field(default=None, init=False, repr=False)
    # its entry in the group's record and the fields it was made of (``records.member_entry``)
    record_entry: tuple[tuple[object, ...], dict[str, object]] | None = field(default=None, init=False, repr=False)

    @property
    def is_awaiting(self) -> bool:
        """Members held in JoinGroup or SyncGroup count as alive (their session cannot expire),
        except a new member, whose parked join expires (Kafka's ``hasSatisfiedHeartbeat``)."""
        return not self.is_new and (self.join_token is not None or self.sync_token is not None)

    @property
    def is_static(self) -> bool:
        return bool(self.instance_id)

    def same_join(self, protocols: tuple[str, ...], metadata: pb.MemberMetadata) -> bool:
        return self.protocols == protocols and self.metadata == metadata

    def same_settings(self, protocols: tuple[str, ...], metadata: pb.MemberMetadata) -> bool:
        """Same assignors and same description, ignoring what the member runs now: a static
        member restarted with the same configuration is the same member (KIP-345)."""
        mine, theirs = pb.MemberMetadata(), pb.MemberMetadata()
        mine.CopyFrom(self.metadata)
        theirs.CopyFrom(metadata)
        for described in (mine, theirs):
            described.ClearField("owned")
            described.ClearField("owned_generation")
            described.ClearField("user_data")
        return self.protocols == protocols and mine == theirs

    def described_bytes(self) -> int:
        """About what this member's entry in the leader's JoinGroup answer takes (bytes)."""
        return entry_bytes(self.metadata.ByteSize(), self.member_id, self.instance_id, self.client_id, self.host)

    def record_metadata(self) -> str:
        """``metadata`` as the group's record keeps it (``b64``), serialised once per message: a record is
        written three times a rebalance, and a re-join with the same description keeps the same message
        (``Group.set_metadata``). Messages are replaced, never changed in place."""
        recorded = self._recorded
        if recorded is None or recorded[0] is not self.metadata:
            recorded = self._recorded = (self.metadata, b64(self.metadata))
        return recorded[1]

    def to_pb(self) -> pb.GroupMember:
        return pb.GroupMember(
            member_id=self.member_id,
            instance_id=self.instance_id,
            client_id=self.client_id,
            host=self.host,
            metadata=self.metadata,
        )


@dataclass(eq=False)
class Group:
    group_id: str
    generation: int = 0
    protocol: str = ""
    leader_id: str = ""
    # the kind of group, set by its first member (JoinGroupRequest.protocol_type)
    protocol_type: str = ""
    # insertion order is join order: the first member becomes leader
    members: dict[str, Member] = field(default_factory=dict)
    # static members: instance id -> its current member id (KIP-345)
    static_members: dict[str, str] = field(default_factory=dict)
    # ids handed out with MEMBER_ID_REQUIRED, not yet joined with them (and who asked for each)
    pending_members: PendingIds = field(default_factory=PendingIds)
    # members of the current generation that have not sent SyncGroup yet
    pending_sync: set[str] = field(default_factory=set)
    assignment: dict[str, list[pb.TaskReplica]] = field(default_factory=dict)
    # the leader's opaque bytes for each member, handed on unchanged in SyncGroup
    user_data: dict[str, bytes] = field(default_factory=dict)
    # the current generation's (cooperative when every member offers it)
    rebalance_protocol: RebalanceProtocol = RebalanceProtocol.EAGER
    # who may still be running each replica as the generation began: the coordinator's own record
    # (``coordinator.model.ownership``), never widened by a member's claim. Cooperative generations
    # give a replica to a new member only once nobody else runs it; the leader is told it always
    owners: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    # members answered this generation's assignment (SyncGroup): told what to stop (not persisted:
    # after a restart the record stays wider, which is the safe side)
    synced: set[str] = field(default_factory=set)
    # replicas the accepted assignment takes away from their owner without giving them to anyone
    # yet: the first half of a cooperative move (the owner re-joins once it has stopped them)
    revoking: set[tuple[str, int]] = field(default_factory=set)
    unassigned: list[pb.UnassignedReplica] = field(default_factory=list)
    tasks: dict[str, pb.Task] = field(default_factory=dict)
    load_snapshot: pb.LoadSnapshot | None = None
    last_error: str = ""
    # initial-delay bookkeeping of a new group (Kafka's InitialDelayedJoin)
    initial_delay_remaining_ms: int = 0
    new_member_during_delay: bool = False
    in_initial_delay: bool = False
    # the coordinator's lost time (``CoordinatorModel.lateness``) when the current join or sync
    # deadline was armed: time lost since then moves the deadline
    phase_lost_mark: float = 0.0
    # bumped by every change of ``tasks``; ``catalog_snapshot()`` copies the catalog once per version
    catalog_version: int = 0
    catalog_cache: CatalogSnapshot | None = None
    # the principal whose call created the group ("" without authentication): its quotas count it
    creator: str = ""
    # the principal whose call created the group when its quotas count against another (a member of
    # a shared prefix creating a group there: ``creator`` is then the prefix's admin), else ""
    founder: str = ""
    # running counts (see the module doc): members offering each assignor name, members whose
    # JoinGroup is held
    protocol_support: Counter[str] = field(default_factory=Counter)
    awaiting_join: int = 0
    # the members' entries in the leader's JoinGroup answer, in bytes (``Member.entry_bytes`` summed)
    metadata_bytes: int = 0
    # owned by the machine of ``coordinator.model.states`` (set when the group is added to it)
    state: GroupState = field(init=False, default=GroupState.EMPTY)
    if TYPE_CHECKING:

        def prepare_rebalance(self) -> bool: ...
        def complete_join(self) -> bool: ...
        def become_empty(self) -> bool: ...
        def complete_sync(self) -> bool: ...
        def mark_dead(self) -> bool: ...

    def all_members_joined(self) -> bool:
        """Every member's JoinGroup is held and no handed-out id is still to join (O(1))."""
        return not self.pending_members and self.awaiting_join == len(self.members)

    def add(self, member: Member) -> None:
        """A new member (its instance id, if any, must be free)."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.protocol_support.update(member.protocols)
        member.entry_bytes = member.described_bytes()
        self.metadata_bytes += member.entry_bytes
        if member.join_token is not None:
            self.awaiting_join += 1
        if member.instance_id:
            assert member.instance_id not in self.static_members, f"instance {member.instance_id} taken"
            self.static_members[member.instance_id] = member.member_id
        if not self.leader_id:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        """Forget a member and everything the generation keeps about it."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._forget_protocols(member.protocols)
            self.metadata_bytes -= member.entry_bytes
            if member.join_token is not None:
                self.awaiting_join -= 1
            if member.instance_id:
                self.static_members.pop(member.instance_id, None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        self.synced.discard(member_id)
        self.assignment.pop(member_id, None)
        self.user_data.pop(member_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), "")
        return member

    def hold_join(self, member: Member, token: Token) -> Token | None:
        """Park ``member``'s JoinGroup until the phase completes; returns the one it replaces."""
        previous, member.join_token = member.join_token, token
        if previous is None:
            self.awaiting_join += 1
        return previous

    def take_join(self, member: Member) -> Token | None:
        """``member``'s parked JoinGroup (None if none), no longer parked."""
        token, member.join_token = member.join_token, None
        if token is not None:
            self.awaiting_join -= 1
        return token

    def set_protocols(self, member: Member, protocols: tuple[str, ...]) -> None:
        """``member`` now offers ``protocols`` (a re-join with other assignors)."""
        if protocols == member.protocols:
            return
        self._forget_protocols(member.protocols)
        self.protocol_support.update(protocols)
        member.protocols = protocols

    def set_metadata(self, member: Member, metadata: pb.MemberMetadata) -> None:
        """``member`` now describes itself with ``metadata`` (a re-join): the running total follows. An
        unchanged description (most re-joins) keeps the member's own message: nothing to recount."""
        if metadata == member.metadata:
            return
        member.metadata = metadata
        self._recount(member)

    def _recount(self, member: Member) -> None:
        self.metadata_bytes -= member.entry_bytes
        member.entry_bytes = member.described_bytes()
        self.metadata_bytes += member.entry_bytes

    def _forget_protocols(self, protocols: tuple[str, ...]) -> None:
        support = self.protocol_support
        for name in protocols:
            left = support[name] - 1
            if left:
                support[name] = left
            else:
                del support[name]

    def replace_static(self, instance_id: str, new_member_id: str) -> tuple[str, Member]:
        """Give the static member of ``instance_id`` a new member id, keeping its assignment and
        its leadership (KIP-345); returns the old id and the member. It moves to the end of the
        join order (as Kafka's ``replaceStaticMember`` removes and re-puts it): renaming a key
        in place would rebuild the whole table, O(members) for one request."""
        old_member_id = self.static_members[instance_id]
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self._recount(member)
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        for table in (self.assignment, self.user_data):
            if old_member_id in table:
                table[new_member_id] = table.pop(old_member_id)  # type: ignore[assignment]
        for members in (self.pending_sync, self.synced):
            if old_member_id in members:
                members.discard(old_member_id)
                members.add(new_member_id)
        self.owners = {key: (who - {old_member_id}) | {new_member_id} if old_member_id in who else who
                       for key, who in self.owners.items()}
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return old_member_id, member

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def catalog_snapshot(self) -> CatalogSnapshot:
        """The catalog as of now, frozen (one copy per ``catalog_version``)."""
        cached = self.catalog_cache
        if cached is None or cached.version != self.catalog_version:
            cached = self.catalog_cache = CatalogSnapshot(self.catalog_version, self.tasks)
        return cached

    def supports_protocols(self, protocol_type: str, protocols: tuple[str, ...], *,
                           excluding: Member | None = None) -> bool:
        """True if a member of ``protocol_type`` offering ``protocols`` shares at least one with
        every member (but ``excluding``, the member asking, when it re-joins with new settings);
        a group with no other member takes any type. O(len(protocols)), from the counts."""
        others = len(self.members) - (excluding is not None)
        if not others:
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        own = frozenset(excluding.protocols) if excluding is not None else frozenset()
        support = self.protocol_support
        return any(support[p] - (p in own) == others for p in protocols)

    def candidate_protocols(self, *, excluding: Member | None = None) -> set[str]:
        """The assignor names every member (but ``excluding``) offers: those some member offers
        that all of them count, read from the first such member's list (at most 64 names)."""
        others = len(self.members) - (excluding is not None)
        first = next((mb for mb in self.members.values() if mb is not excluding), None)
        if first is None:
            return set()
        own = frozenset(excluding.protocols) if excluding is not None else frozenset()
        return {p for p in first.protocols if self.protocol_support[p] - (p in own) == others}

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred common protocol; ties go to the
        leader's (first member's) order."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(p for p in member.protocols if p in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values()))
        order = {p: i for i, p in enumerate(first.protocols)}
        return max(votes, key=lambda p: (votes[p], -order.get(p, len(order))))

    def validate(self) -> None:
        """Invariants the coordinator keeps; tests call this after every step."""
        state = self.state
        if state is GroupState.EMPTY:
            assert not self.members, f"{self.group_id}: Empty with members"
        if state in (GroupState.AWAITING_SYNC, GroupState.STABLE):
            assert self.members, f"{self.group_id}: {state} without members"
            assert self.leader_id in self.members, f"{self.group_id}: leader {self.leader_id} not a member"
            assert self.protocol, f"{self.group_id}: no protocol in {state}"
        if state is GroupState.STABLE:
            assert set(self.assignment) <= set(self.members), f"{self.group_id}: assignment names non-members"
            owners: dict[tuple[str, int], str] = {}
            for member_id, replicas in self.assignment.items():
                for replica in replicas:
                    key = (replica.task_id, replica.replica)
                    assert key not in owners, f"{self.group_id}: {key} owned by {owners[key]} and {member_id}"
                    owners[key] = member_id
            for u in self.unassigned:
                key = (u.task.task_id, u.task.replica)
                assert key not in owners, f"{self.group_id}: {key} both assigned and unassigned"
                owners[key] = ""
            for task in self.tasks.values():
                for r in range(max(1, task.replicas)):
                    assert (task.task_id, r) in owners or (task.task_id, r) in self.revoking, \
                        f"{self.group_id}: {task.task_id}#{r} not assigned"
        statics = {m.instance_id: m.member_id for m in self.members.values() if m.instance_id}
        assert statics == self.static_members, f"{self.group_id}: static members {self.static_members} != {statics}"
        assert self.pending_sync <= set(self.members), f"{self.group_id}: pending sync names non-members"
        recount = Counter(p for m in self.members.values() for p in m.protocols)
        assert recount == self.protocol_support, f"{self.group_id}: protocol counts {self.protocol_support} != {recount}"
        held = sum(1 for m in self.members.values() if m.join_token is not None)
        assert held == self.awaiting_join, f"{self.group_id}: {self.awaiting_join} joins counted, {held} held"
        size = sum(m.described_bytes() for m in self.members.values())
        assert size == self.metadata_bytes, f"{self.group_id}: {self.metadata_bytes} metadata bytes counted, {size}"
        for member in self.members.values():
            if member.sync_token is not None:
                assert state in (GroupState.AWAITING_SYNC,), f"{self.group_id}: sync held in {state}"
            if member.join_token is not None:
                assert state is GroupState.PREPARING_REBALANCE, f"{self.group_id}: join held in {state}"
