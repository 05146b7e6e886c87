"""The data of one consumer-protocol group (KIP-848) and its members, kept as running state.

A group has an epoch (bumped by every change of membership, of a member's metadata or of the
catalog), a target assignment computed for some group epoch (the target epoch), and for each
member its reconciliation state (``coordinator.model.reconcile``). ``holder`` maps each task
replica some member holds (assigned or revoking) to that member: kept as members change, so
the question a heartbeat asks ("does another member hold this task?") costs O(1), and no
request scans the group. ``validate`` recounts it all (tests run it after every step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from groupcoord.assignors.base import MemberInfo, TaskReplica
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled
from groupcoord.coordinator.model.split_lineage import children_of, parent_holder, recorded
from groupcoord.coordinator.model.target_map import TargetMap
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ClassicTraits", "ConsumerGroup", "ConsumerMember", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "JOIN_EPOCH",
           "owning"]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@dataclass(frozen=True, slots=True)
class ClassicTraits:
    """A classic-protocol member inside a consumer group (``coordinator.model.conversion``): what its
    JoinGroup said that the consumer protocol has no field for, kept to answer it and to convert back."""

    protocols: tuple[str, ...]
    protocol_type: str
    rebalance_protocols: tuple[str, ...]


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str
    client_id: str
    host: str
    principal: str
    metadata: pb.MemberMetadata
    session_timeout_ms: int
    rebalance_timeout_ms: int
    reconciled: Reconciled = field(default_factory=lambda: Reconciled(MemberState.STABLE, 0, frozenset()))
    previous_epoch: int = -1
    # a static member gone for a while (epoch -2): its tasks wait for it until its session ends
    away: bool = False
    # the assignment as last sent; an answer carries the assignment only when it differs
    sent: frozenset[TaskReplica] | None = None
    sent_epoch: int = 0  # the member's epoch in the answer that last carried its assignment
    # that assignment as its wire bytes and its set: a heartbeat whose ``owned`` is those bytes owns that
    # set, taken without building it (``consumer_checks.owned_of``)
    sent_wire: tuple[bytes, frozenset[TaskReplica]] | None = None
    # the coordinator's lost time when the member was last heard from (as classic members keep it)
    lost_mark: float = 0.0
    last_seen: float = 0.0  # when the coordinator last heard from it (DescribeGroup)
    # what the assignor sees of its placement (no ``owned``), kept until its metadata changes: a new
    # target reads it as is, and adds what the member owns only for a full pass (``consumer_target``)
    info: MemberInfo | None = None
    classic: ClassicTraits | None = None  # set for a member speaking the classic protocol (a converted group)
    # loaded at an epoch its record implies (``consumer_records.implied_epoch``): a heartbeat at any
    # epoch from this one up to its own is the member's (0: none; its next change resets it)
    accepts_from: int = 0
    assignor: str = ""  # the server-side assignor it names ("" none: it counts for no name)

    @property
    def epoch(self) -> int:
        return self.reconciled.epoch

    @property
    def held(self) -> frozenset[TaskReplica]:
        """What the member may be running: its assignment and what it has not yet given up."""
        return self.reconciled.assigned | self.reconciled.revoking

    def placement_view(self) -> MemberInfo:
        """The member as the assignor places it, without what it owns (which changes every target):
        built once per metadata, so a computation takes 10,000 members' views by reference."""
        if self.info is None:
            m = self.metadata
            self.info = MemberInfo(
                member_id=self.member_id, instance_id=self.instance_id, client_id=self.client_id, host=self.host,
                rack=m.rack, pool=m.pool, capacity=m.capacity or 1.0, attributes=dict(m.attributes))
        return self.info

    def assignor_view(self) -> MemberInfo:
        """The whole view a full pass reads: the placement and what the member owns now."""
        return owning(self.placement_view(), self.reconciled)


def owning(view: MemberInfo, reconciled: Reconciled) -> MemberInfo:
    """``view`` with the replicas ``reconciled`` assigns as owned, at its epoch (for a full pass)."""
    return MemberInfo(member_id=view.member_id, instance_id=view.instance_id, client_id=view.client_id,
                      host=view.host, rack=view.rack, pool=view.pool, capacity=view.capacity,
                      attributes=view.attributes, owned=tuple(sorted(reconciled.assigned)),
                      owned_generation=reconciled.epoch)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    assignor: str
    epoch: int = 1  # a new group's first target (empty, epoch 1) is its own: member epochs start at 1
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target_epoch: int = 1
    target: dict[str, frozenset[TaskReplica]] = field(default_factory=TargetMap)  # a ``TargetMap`` (``__setattr__``)
    holder: dict[TaskReplica, str] = field(default_factory=dict)
    catalog_version: int | None = None  # of the group's catalog when the epoch last counted it
    computing: bool = False  # a target computation is running off the loop
    # how a member's record is built (``consumer_records.member_entry``); ``changed``: the members whose
    # record must be written (changed or gone) since the last write, so a write reads no other member
    entry_of: Callable[[ConsumerMember], dict[str, object]] | None = None
    changed: set[str] = field(default_factory=set)
    last_head: dict[str, object] | None = None  # the group's own record as last written (a write skips it if equal)
    last_error: str = ""  # the assignor's last failure, if its last run failed
    # the basis of an incremental target: the catalog the target was computed from, and the replicas of
    # the target's members gone since (``coordinator.model.consumer_target.target_for``)
    target_catalog: CatalogSnapshot | None = None
    orphans: set[TaskReplica] = field(default_factory=set)
    classic_members: int = 0  # members speaking the classic protocol (a converted group), counted
    # a "client:<name>" assignor (``coordinator.model.leader_assignor``): the leader, the request it is
    # asked (and whether its answer carried it), a leader whose last answer failed, replica -> member
    leader_id: str = ""
    asked: pb.TargetRequest | None = None
    asked_sent: bool = False
    asked_catalog: int | None = None  # the catalog version the leader was asked with (its split's fence)
    failed_leader: str = ""
    target_index: dict[TaskReplica, str] | None = None
    named: dict[str, int] = field(default_factory=dict)  # assignor name -> members naming it (``consumer_assignor``)
    # members waiting for tasks of their target that others hold (UNRELEASED_TASKS), each such task -> the
    # member waiting for it, and the waiting members some of whose tasks were let go since their last step:
    # what the Session streams tell at once (``coordinator.rpc.session_news.released_news``) rather than at
    # the member's next heartbeat; a member's own step takes what is free, so it leaves ``unblocked`` then
    waiting_for: dict[str, frozenset[TaskReplica]] = field(default_factory=dict)
    wanted_by: dict[TaskReplica, str] = field(default_factory=dict)
    unblocked: set[str] = field(default_factory=set)
    # a split's child id -> its parent id, while a member may still run the parent: the child counts as
    # held by the parent's holder until it lets the parent go (``split_lineage``; empty nearly always)
    split_from: dict[str, str] = field(default_factory=dict)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "target":  # every target change is tracked for the record (``target_map``)
            value = TargetMap.replacing(self.__dict__.get("target"), value)  # type: ignore[arg-type]
        object.__setattr__(self, name, value)

    def bump(self) -> None:
        """Something the assignor reads changed: a new group epoch (the target is now behind it)."""
        self.epoch += 1

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        self.classic_members += member.classic is not None
        self._count(member.assignor, 1)
        if member.instance_id:
            self.static_members[member.instance_id] = member.member_id
        self.refresh(member)

    def refresh(self, member: ConsumerMember) -> None:
        """The member changed (state, metadata, timeouts): its record is written with the group's next write."""
        self.changed.add(member.member_id)

    def remove(self, member: ConsumerMember) -> None:
        """The member is gone: whatever it held is free for the next owner at once."""
        self.hold(member, Reconciled(MemberState.STABLE, member.epoch, frozenset()))
        del self.members[member.member_id]
        self.classic_members -= member.classic is not None
        self._count(member.assignor, -1)
        self.changed.add(member.member_id)
        if member.instance_id and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]

    def rename(self, member: ConsumerMember, assignor: str) -> None:
        """The member names another assignor ("" none): counted, and its record written."""
        self._count(member.assignor, -1)
        member.assignor = assignor
        self._count(assignor, 1)
        self.refresh(member)

    def _count(self, assignor: str, by: int) -> None:
        if assignor:
            count = self.named.get(assignor, 0) + by
            if count > 0:
                self.named[assignor] = count
            else:
                self.named.pop(assignor, None)

    def hold(self, member: ConsumerMember, reconciled: Reconciled) -> bool:
        """Set the member's reconciliation state, keeping ``holder`` (O(what changed)). Returns whether
        its record must be written: not for a Stable member that only takes the target epoch, its
        tasks the same (what its record implies: ``consumer_records.implied_epoch``), so a change of k
        members' targets writes k members, not the group."""
        now = member.reconciled
        member.accepts_from = 0
        if (reconciled.epoch > now.epoch and now.state is reconciled.state is MemberState.STABLE
                and member.classic is None and not now.revoking and not reconciled.revoking
                and (reconciled.assigned is now.assigned or reconciled.assigned == now.assigned)):
            member.previous_epoch, member.reconciled = now.epoch, reconciled  # holds the same tasks
            return False
        before, after = member.held, reconciled.assigned | reconciled.revoking
        member_id = member.member_id
        for task in before - after:
            if self.holder.get(task) == member_id:
                del self.holder[task]
                waiting = self.wanted_by.get(task)
                if waiting is not None and waiting != member_id:
                    self.unblocked.add(waiting)
                if self.split_from:
                    self._unblock_children(task, member_id)
        self._wait(member_id, reconciled)
        for task in after - before:
            owner = self.holder.setdefault(task, member_id)
            if owner != member_id:
                raise AssertionError(f"{task} given to {member_id} while {owner} holds it")
        if reconciled.epoch != member.epoch:
            member.previous_epoch = member.epoch
        member.reconciled = reconciled
        if member.member_id in self.members:
            self.refresh(member)
        return True

    def _wait(self, member_id: str, reconciled: Reconciled) -> None:
        """Note what the member now waits for (O(its wait)): its step took whatever was free."""
        self.unblocked.discard(member_id)
        for task in self.waiting_for.pop(member_id, ()):
            if self.wanted_by.get(task) == member_id:
                del self.wanted_by[task]
        if reconciled.state is MemberState.UNRELEASED_TASKS and member_id in self.members:
            missing = self.target_of(member_id) - reconciled.assigned
            self.waiting_for[member_id] = missing
            for task in missing:
                self.wanted_by[task] = member_id

    def _unblock_children(self, parent: TaskReplica, member_id: str) -> None:
        """A split's parent was let go: the members waiting for its children are told (stream news), and
        the lineage forgets parents nobody holds (O(what is held), once per parent replica let go)."""
        children = children_of(self.split_from, parent.task_id)
        for child in children:
            waiting = self.wanted_by.get(TaskReplica(child, parent.replica))
            if waiting is not None and waiting != member_id:
                self.unblocked.add(waiting)
        if children:
            self.split_from = recorded(self.split_from, (), self.holder)

    def held_elsewhere(self, member_id: str) -> Callable[[TaskReplica], bool]:
        holder, split_from = self.holder, self.split_from

        def elsewhere(task: TaskReplica) -> bool:
            owner = holder.get(task)
            if owner is None and split_from:  # a split's child waits for its parent's release
                owner = parent_holder(split_from, holder, task)
            return owner is not None and owner != member_id

        return elsewhere

    def target_of(self, member_id: str) -> frozenset[TaskReplica]:
        return self.target.get(member_id, frozenset())

    def validate(self) -> None:
        """The invariants, recounted: each replica held by at most one member, ``holder`` exact,
        epochs ordered (no member ahead of the target, no target ahead of the group)."""
        seen: dict[TaskReplica, str] = {}
        for member_id, member in self.members.items():
            assert member.member_id == member_id
            assert not (member.reconciled.assigned & member.reconciled.revoking), member_id
            for task in member.held:
                assert task not in seen, f"{task} held by {seen[task]} and {member_id}"
                seen[task] = member_id
            assert member.epoch <= self.target_epoch or member.away, (member_id, member.epoch, self.target_epoch)
        assert seen == self.holder, "holder map out of step with the members"
        for task, member_id in self.holder.items():  # never a child and its parent on two members at once
            parent_owner = parent_holder(self.split_from, self.holder, task)
            assert parent_owner in (None, member_id), f"{task} held by {member_id}, its parent by {parent_owner}"
        assert set(self.waiting_for) <= {i for i, m in self.members.items()
                                         if m.reconciled.state is MemberState.UNRELEASED_TASKS}
        assert self.unblocked <= set(self.waiting_for), "a member told of freed tasks that waits for none"
        assert self.target_epoch <= self.epoch
        assert self.classic_members == sum(m.classic is not None for m in self.members.values())
        assert self.named == {a: sum(m.assignor == a for m in self.members.values())
                              for a in {m.assignor for m in self.members.values() if m.assignor}}
        assert {i: m for i, m in self.static_members.items()} == {
            m.instance_id: m.member_id for m in self.members.values() if m.instance_id}
