"""The data of one group and its members (behaviour lives in the handlers of ``coordinator.model``).

A group is a ``transitions`` model: its ``state`` attribute is owned by the
machine of ``coordinator.states`` and only changes through its triggers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator.effects import Token
from coordinator.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Member", "Group"]


@dataclass(eq=False)
class Member:
    member_id: str
    group_id: str
    client_id: str
    instance_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[str, ...]
    metadata: pb.MemberMetadata
    join_token: Token | None = None  # a JoinGroup held until the join phase completes
    sync_token: Token | None = None  # a SyncGroup held until the leader's assignment arrives
    last_seen: float = 0.0

    @property
    def is_awaiting(self) -> bool:
        """Members held in JoinGroup or SyncGroup count as alive (their session cannot expire)."""
        return self.join_token is not None or self.sync_token is not None

    def same_join(self, protocols: tuple[str, ...], metadata: pb.MemberMetadata) -> bool:
        return self.protocols == protocols and self.metadata == metadata

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
    # insertion order is join order: the first member becomes leader
    members: dict[str, Member] = field(default_factory=dict)
    # ids handed out with MEMBER_ID_REQUIRED, not yet joined with them
    pending_members: set[str] = field(default_factory=set)
    # members of the current generation that have not sent SyncGroup yet
    pending_sync: set[str] = field(default_factory=set)
    assignment: dict[str, list[pb.TaskReplica]] = field(default_factory=dict)
    unassigned: list[pb.UnassignedReplica] = field(default_factory=list)
    tasks: dict[str, pb.Task] = field(default_factory=dict)
    load_snapshot: pb.LoadSnapshot | None = None
    last_error: str = ""
    # initial-delay bookkeeping of a new group (Kafka's InitialDelayedJoin)
    initial_delay_remaining_ms: int = 0
    new_member_during_delay: bool = False
    in_initial_delay: bool = False
    # serialised catalog for records, rebuilt only when ``catalog_version`` moves
    catalog_version: int = 0
    record_tasks_cache: tuple[int, list[str]] | None = None
    # owned by the machine of ``coordinator.states`` (set when the group is added to it)
    state: GroupState = field(init=False, default=GroupState.EMPTY)
    if TYPE_CHECKING:

        def prepare_rebalance(self) -> bool: ...
        def complete_join(self) -> bool: ...
        def become_empty(self) -> bool: ...
        def complete_sync(self) -> bool: ...
        def mark_dead(self) -> bool: ...

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_token is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports_protocols(self, protocols: tuple[str, ...]) -> bool:
        """True if a member offering ``protocols`` shares at least one with every member."""
        if not self.members:
            return bool(protocols)
        return bool(self.candidate_protocols() & set(protocols))

    def candidate_protocols(self) -> set[str]:
        members = iter(self.members.values())
        common = set(next(members).protocols)
        for member in members:
            common &= set(member.protocols)
        return common

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
                    assert (task.task_id, r) in owners, f"{self.group_id}: {task.task_id}#{r} not assigned"
        for member in self.members.values():
            if member.sync_token is not None:
                assert state in (GroupState.AWAITING_SYNC,), f"{self.group_id}: sync held in {state}"
            if member.join_token is not None:
                assert state is GroupState.PREPARING_REBALANCE, f"{self.group_id}: join held in {state}"
