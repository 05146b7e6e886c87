"""The assignor plug-in contract.

The group's leader worker runs an assignor once per generation. An assignor is
anything with a ``name`` and an ``assign(context) -> Assignment`` method; it
does no I/O and takes all randomness from ``context.rng`` so a given seed gives
a given result. The coordinator validates what it returns (every placeable
task replica assigned exactly once, replicas of one task on distinct members,
only current members, pools kept) before the group accepts it.

Worked example (round-robin, two members, three tasks)::

    ctx = AssignmentContext(group_id="g", generation=1,
                            members=(MemberInfo("m-a"), MemberInfo("m-b")),
                            tasks=(TaskSpec("t1"), TaskSpec("t2"), TaskSpec("t3")))
    RoundRobinAssignor().assign(ctx).members
    # {"m-a": [t1#0, t3#0], "m-b": [t2#0]}
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from types import MappingProxyType
from typing import NamedTuple, Protocol, runtime_checkable

from groupcoord.assignors.snapshot import LoadSnapshot

__all__ = [
    "RebalanceProtocol",
    "TaskReplica",
    "replica_of",
    "TaskSpec",
    "MemberInfo",
    "AssignmentContext",
    "Assignment",
    "TaskSplit",
    "Assignor",
    "RebalanceCheck",
    "AssignorError",
    "eligible_members",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})


class AssignorError(Exception):
    """An assignor cannot produce an assignment for this input (the message says why).

    The leader reports it to the coordinator, which answers INVALID_ASSIGNMENT
    with this message and keeps the previous assignment's tasks stopped until the
    input changes (a member joins, the catalog is edited).
    """


class TaskReplica(NamedTuple):
    """One replica of one task; replica 0 is the leader replica.

    A NamedTuple rather than a frozen dataclass: assignors create hundreds of
    thousands of these per generation, and a tuple is several times cheaper to build.
    """

    task_id: str
    replica: int = 0

    def __str__(self) -> str:
        return f"{self.task_id}#{self.replica}"


replica_of: Callable[[tuple[str, int]], TaskReplica] = partial(tuple.__new__, TaskReplica)
"""``replica_of((task_id, replica))`` is ``TaskReplica(task_id, replica)`` built in C: the named tuple's
own ``__new__`` is a Python function, a tenth of a large assignment's time at 10,000 members x
100,000 tasks (``benchmarks/assignors_bench.py``)."""


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A task of the group's catalog."""

    task_id: str
    replicas: int = 1
    pool: str = ""
    weight: float = 1.0
    attributes: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    def replica_ids(self) -> tuple[TaskReplica, ...]:
        if self.replicas == 1:  # the common case, asked for once per task per assignment
            return (replica_of((self.task_id, 0)),)
        return tuple([TaskReplica(self.task_id, r) for r in range(self.replicas)])


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A member as the leader sees it: identity, placement metadata, what it owns."""

    member_id: str
    instance_id: str = ""
    client_id: str = ""
    host: str = ""
    rack: str = ""
    pool: str = ""
    capacity: float = 1.0
    attributes: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    owned: tuple[TaskReplica, ...] = ()
    owned_generation: int = -1


@dataclass(frozen=True, slots=True)
class TaskSplit:
    """Replace ``parent_task_id`` by ``children`` in the catalog (Pulsar bundle split)."""

    parent_task_id: str
    children: tuple[TaskSpec, ...]


class RebalanceProtocol(StrEnum):
    """How a group rebalances (KIP-429), spelled on the wire and in records as its value."""

    EAGER = "eager"
    """Every member stops all its tasks before each rebalance."""
    COOPERATIVE = "cooperative"
    """Only the tasks that move stop, over two generations (``assignors.cooperative``)."""

    @classmethod
    def of(cls, spelled: str) -> RebalanceProtocol:
        """The protocol ``spelled`` names; anything else ("" on the wire, proto3's default) is eager."""
        return cls.COOPERATIVE if spelled == cls.COOPERATIVE else cls.EAGER


@dataclass(frozen=True, slots=True)
class AssignmentContext:
    """Everything an assignor may use. Members and tasks are sorted by id."""

    group_id: str
    generation: int
    members: tuple[MemberInfo, ...]
    tasks: tuple[TaskSpec, ...]
    load_snapshot: LoadSnapshot | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    rebalance_protocol: RebalanceProtocol = RebalanceProtocol.EAGER
    """``COOPERATIVE`` (KIP-429): each member's ``owned`` is what it runs now, and a replica owned
    by one member may not go to another in this generation (see ``assignors.cooperative``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(sorted(self.members, key=lambda m: m.member_id)))
        object.__setattr__(self, "tasks", tuple(sorted(self.tasks, key=lambda t: t.task_id)))

    def previous_owners(self) -> dict[TaskReplica, str]:
        """Who owned each replica last (the most recent claim wins if two members claim one)."""
        owners: dict[TaskReplica, str] = {}
        generation: dict[str, int] = {}  # each claimant's owned generation, to settle a clash
        for member in self.members:
            member_id, claimed = member.member_id, member.owned_generation
            generation[member_id] = claimed
            if not owners.keys() & member.owned:  # the common case: a whole list at once (100,000 at scale)
                owners.update(dict.fromkeys(member.owned, member_id))
                continue
            for replica in member.owned:
                seen = owners.get(replica)
                if seen is None or claimed > generation[seen]:
                    owners[replica] = member_id
        return owners


@dataclass(slots=True)
class Assignment:
    """An assignor's answer: each member's replicas, and what could not be placed.

    Every member of the context appears in ``members`` (possibly with no tasks).
    ``unassigned`` maps a replica to the reason it was not placed; the
    coordinator accepts that only when no eligible member could take it.
    """

    members: dict[str, list[TaskReplica]]
    unassigned: dict[TaskReplica, str] = field(default_factory=dict)
    splits: list[TaskSplit] = field(default_factory=list)


@runtime_checkable
class Assignor(Protocol):
    """What a group's leader runs to decide the assignment."""

    name: str

    def assign(self, context: AssignmentContext) -> Assignment: ...


@runtime_checkable
class RebalanceCheck(Protocol):
    """Optional assignor hook: may the group's balance be improved without a membership change?

    The leader worker asks an assignor that has both members every ``recheck_interval_s``
    seconds (0 turns the check off) with a context built from the newest load snapshot;
    ``True`` makes the leader re-join, which rebalances the group. The Pulsar shedders use it.
    """

    recheck_interval_s: float

    def needs_rebalance(self, context: AssignmentContext) -> bool: ...


def eligible_members(task: TaskSpec, members: tuple[MemberInfo, ...]) -> tuple[MemberInfo, ...]:
    """Members allowed to run ``task``: those of its pool.

    Pools isolate physically (seed 001 §3): the empty pool is the default pool,
    so an unpooled task goes only to unpooled members, and a member declaring a
    pool runs only that pool's tasks.
    """
    return tuple(m for m in members if m.pool == task.pool)
