"""Kafka's replica placement ("replica shift"), as a function and as an assignor.

Kafka places the replicas of a new topic so that leaders are dealt round-robin
from a random broker and followers sit at a shift from their leader that grows
by one each time the partition ids wrap around the broker list; the growing
shift keeps the follower sets of different rounds apart, so a broker's load is
spread over many peers (seed 001 §2, Kafka's ``AdminUtils``). With rack
information on every broker, the broker list is first interleaved by rack and
followers skip racks already holding a replica of the partition while unused
racks remain.

Worked example (the seed's table: 5 brokers, 10 partitions, RF 3, fixed start 0)::

    >>> table = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, fixed_start_index=0)
    >>> table[0], table[3], table[5], table[9]
    ([0, 1, 2], [3, 4, 0], [0, 2, 3], [4, 1, 2])

Partitions 0-4 use shift 0 (followers at +1, +2), partitions 5-9 shift 1
(followers at +2, +3). The seed's prose starts its "IncreasingShift" at 1;
its table, like Kafka, starts at 0 — the table is what this module reproduces.

Error tree (all are ``AssignorError`` so the coordinator answers INVALID_ASSIGNMENT,
and ``ValueError`` because they reject an argument)::

    ReplicaAssignmentError
    ├── InvalidPartitionCountError        n_partitions <= 0
    ├── InvalidReplicationFactorError     replication_factor <= 0
    │   └── ReplicationFactorTooLargeError  replication_factor > number of brokers
    └── IncompleteRackInfoError           racks given for some brokers but not all
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.group_states import GroupStates
from groupcoord.assignors.incremental import TargetChange
from groupcoord.assignors.kafka_replica_incremental import Placed, added_at_the_end, placed_by

__all__ = [
    "IncompleteRackInfoError",
    "InvalidPartitionCountError",
    "InvalidReplicationFactorError",
    "KafkaReplicaShiftAssignor",
    "ReplicaAssignmentError",
    "ReplicationFactorTooLargeError",
    "assign_replicas_to_brokers",
    "rack_alternated_brokers",
]

log = logging.getLogger(__name__)

B = TypeVar("B", bound=Hashable)


class ReplicaAssignmentError(AssignorError, ValueError):
    """The replica shift cannot place these partitions (the message says why)."""


class InvalidPartitionCountError(ReplicaAssignmentError):
    """The number of partitions to place is not positive."""


class InvalidReplicationFactorError(ReplicaAssignmentError):
    """The replication factor is not positive."""


class ReplicationFactorTooLargeError(InvalidReplicationFactorError):
    """More replicas per partition than brokers: two replicas would share a broker."""


class IncompleteRackInfoError(ReplicaAssignmentError):
    """Some brokers have a rack and some do not, so rack spread cannot be promised."""


def assign_replicas_to_brokers(
    brokers: Sequence[B],
    n_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    *,
    racks: Mapping[B, str | None] | None = None,
    rng: random.Random | None = None,
) -> dict[int, list[B]]:
    """Map partition id -> broker list (leader first), as Kafka's ``assignReplicasToBrokers``.

    ``brokers`` are used in the order given (Kafka's callers pass them sorted by
    id). ``fixed_start_index >= 0`` fixes both the start index and the initial
    shift (as in Kafka); otherwise both are drawn from ``rng`` — start index
    first, then shift, each ``rng.randrange(len(brokers))`` — and a fresh
    unseeded ``random.Random`` is used when ``rng`` is None. Partition ids
    start at ``max(0, start_partition_id)``; the shift and the leader position
    depend on the absolute partition id, so partitions added later continue
    the pattern. ``racks`` maps broker -> rack; a missing, ``None`` or empty
    rack counts as "no rack", and rack entries for brokers not in ``brokers``
    are ignored.
    """
    if n_partitions <= 0:
        raise InvalidPartitionCountError(f"number of partitions must be larger than 0, got {n_partitions}")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(f"replication factor must be larger than 0, got {replication_factor}")
    if replication_factor > len(brokers):
        raise ReplicationFactorTooLargeError(
            f"replication factor {replication_factor} larger than the {len(brokers)} available broker(s)"
        )
    if len(set(brokers)) != len(brokers):
        raise ReplicaAssignmentError(f"broker list has duplicates: {list(brokers)!r}")
    rack_of = _rack_map(brokers, racks)
    rng = rng if rng is not None else random.Random()
    n = len(brokers)
    start_index = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    first_id = max(0, start_partition_id)
    if rack_of is None:
        return _rack_unaware(list(brokers), n_partitions, replication_factor, start_index, shift, first_id)
    return _rack_aware(rack_of, n_partitions, replication_factor, start_index, shift, first_id)


def rack_alternated_brokers(rack_of: Mapping[B, str]) -> list[B]:
    """Brokers interleaved by rack: racks in sorted order, brokers of a rack sorted.

    ``{0: "r1", 1: "r3", 2: "r3", 3: "r2", 4: "r2", 5: "r1"}`` gives
    ``[0, 3, 1, 5, 4, 2]``: one broker of each rack per round, so any window
    of consecutive entries touches as many racks as it can.
    """
    by_rack: dict[str, list[B]] = defaultdict(list)
    for broker, rack in rack_of.items():
        by_rack[rack].append(broker)
    columns = [sorted(by_rack[rack]) for rack in sorted(by_rack)]  # type: ignore[type-var]
    depth = max((len(c) for c in columns), default=0)
    return [column[i] for i in range(depth) for column in columns if i < len(column)]


def _rack_map(brokers: Sequence[B], racks: Mapping[B, str | None] | None) -> dict[B, str] | None:
    """Brokers' racks if every broker has one, None if none has; raise on a mix."""
    if not racks:
        return None
    known = {b: racks.get(b) for b in brokers}
    missing = [b for b, rack in known.items() if not rack]
    if len(missing) == len(brokers):
        return None
    if missing:
        raise IncompleteRackInfoError(
            f"not all brokers have rack information for rack-aware assignment; missing: {missing!r}"
        )
    return {b: rack for b, rack in known.items() if rack}


def _rack_unaware(
    brokers: list[B], n_partitions: int, rf: int, start_index: int, shift: int, first_id: int
) -> dict[int, list[B]]:
    n = len(brokers)
    placement: dict[int, list[B]] = {}
    followers = range(rf - 1)
    for pid in range(first_id, first_id + n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1  # the partition ids wrapped around the broker list
        first = (pid + start_index) % n
        replicas = [brokers[first]]
        for j in followers:
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        placement[pid] = replicas
    return placement


def _rack_aware(
    rack_of: dict[B, str], n_partitions: int, rf: int, start_index: int, shift: int, first_id: int
) -> dict[int, list[B]]:
    arranged = rack_alternated_brokers(rack_of)
    n = len(arranged)
    n_racks = len(set(rack_of.values()))
    arranged_racks = [rack_of[b] for b in arranged]
    placement: dict[int, list[B]] = {}
    for pid in range(first_id, first_id + n_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start_index) % n
        replicas = [arranged[first]]
        used_racks = {arranged_racks[first]}
        used = {first}
        base = shift * n_racks  # followers step over whole rack rounds
        k = 0
        for _ in range(rf - 1):
            while True:
                index = (first + 1 + (base + k) % (n - 1)) % n
                rack = arranged_racks[index]
                k += 1
                # Take it only if its rack is new (or every rack is used) and it is a new broker
                # (or every broker is used); otherwise walk on along the shifted sequence.
                if (rack not in used_racks or len(used_racks) == n_racks) and (index not in used or len(used) == n):
                    replicas.append(arranged[index])
                    used_racks.add(rack)
                    used.add(index)
                    break
        placement[pid] = replicas
    return placement


class KafkaReplicaShiftAssignor:
    """Kafka's replica shift over the group: tasks are partitions, members are brokers.

    Per pool (seed 001 §3), the pool's tasks sorted by id are partitions
    0..N-1 and the pool's members sorted by id are the broker list; one start
    index and one shift are drawn from ``context.rng`` per pool (pools in
    sorted order, pools without tasks draw nothing). Replica 0 is the leader.

    Decisions where Kafka has no counterpart:

    * Tasks of one pool may ask for different replication factors. The pool is
      placed once with its largest factor and each task keeps the first
      ``task.replicas`` brokers of its list. Kafka's list for a partition does
      not depend on the factor beyond its length, so every task gets exactly
      what Kafka would give that partition alone, and the leaders stay dealt
      round-robin over the whole pool.
    * A task whose factor exceeds its pool's members, or is below 1, makes
      the whole assignment fail with ``AssignorError`` naming the task, as
      Kafka refuses such a topic. A pool with no members reports its tasks'
      replicas in ``Assignment.unassigned``.
    * Racks come from ``MemberInfo.rack`` (empty means none). If only some of
      a pool's members have one, the pool falls back to the rack-unaware
      placement and logs a warning, so one misconfigured worker does not stop
      the group; pass ``strict_racks=True`` to raise instead.
    * This assignor is not sticky: a new task or member renumbers the
      partitions and a new ``rng`` draw moves leaders. Use ``sticky`` when
      movement matters.

    Worked example: five members ``m0``..``m4`` without racks, ten tasks
    ``t0``..``t9`` with 3 replicas, and an ``rng`` whose two draws are 0 and 0
    give ``t0 -> m0, m1, m2``, ``t5 -> m0, m2, m3``: the seed's table with
    broker ``i`` read as ``m{i}`` (each member then holds 6 replicas, 2 of
    them leader replicas).
    """

    name = "kafka-replica-shift"

    def __init__(self, *, strict_racks: bool = False) -> None:
        self.strict_racks = strict_racks
        # per group, what its last round placed (``kafka_replica_incremental``): the basis for adding at the end
        self._placed: GroupStates[dict[str, Placed | None]] = GroupStates(dict)

    def assign(self, context: AssignmentContext) -> Assignment:
        slot = self._placed.get(context.group_id)
        slot.pop("last", None)
        rng_state = context.rng.getstate()
        result = self._assign(context)
        slot["last"] = placed_by(context, rng_state)
        return result

    def assign_incremental(self, change: TargetChange) -> dict[str, frozenset[TaskReplica]] | None:
        """Tasks added after every placed one, members unchanged: the full pass's answer from where the
        last round stopped (``kafka_replica_incremental``); anything else ``None`` (it moves nearly everything)."""
        slot = self._placed.get(change.group_id)

        def deal(members: list[MemberInfo], n: int, first_id: int, rng: random.Random) -> dict[int, list[str]]:
            racks = self._racks("(default)", members)
            return assign_replicas_to_brokers([m.member_id for m in members], n, 1, start_partition_id=first_id,
                                              racks=racks, rng=rng)

        done = added_at_the_end(change, slot.get("last"), deal)
        if done is None:
            return None
        target, slot["last"] = done
        return target

    def _assign(self, context: AssignmentContext) -> Assignment:
        result = Assignment(members={m.member_id: [] for m in context.members})
        pools: dict[str, list[TaskSpec]] = defaultdict(list)
        for task in context.tasks:
            pools[task.pool].append(task)
        members_of: dict[str, list[MemberInfo]] = defaultdict(list)
        for member in context.members:
            members_of[member.pool].append(member)
        for pool in sorted(pools):
            self._assign_pool(pool, pools[pool], members_of.get(pool, []), context, result)
        return result

    def _assign_pool(
        self,
        pool: str,
        tasks: list[TaskSpec],
        members: list[MemberInfo],
        context: AssignmentContext,
        result: Assignment,
    ) -> None:
        label = repr(pool) if pool else "(default)"
        for task in tasks:
            if task.replicas < 1:
                raise AssignorError(f"task {task.task_id!r} has replication factor {task.replicas}; it must be >= 1")
        if not members:
            reason = f"pool {label} has no members"
            for task in tasks:
                result.unassigned.update(dict.fromkeys(task.replica_ids(), reason))
            return
        for task in tasks:
            if task.replicas > len(members):
                raise AssignorError(
                    f"task {task.task_id!r} needs {task.replicas} replicas but pool {label}"
                    f" has only {len(members)} member(s)"
                )
        placement = assign_replicas_to_brokers(
            [m.member_id for m in members],
            len(tasks),
            max(t.replicas for t in tasks),
            racks=self._racks(label, members),
            rng=context.rng,
        )
        out = result.members
        for pid, task in enumerate(tasks):
            owners, task_id = placement[pid], task.task_id
            for r in range(task.replicas):  # placement lists are as long as the pool's largest factor
                out[owners[r]].append(TaskReplica(task_id, r))

    def _racks(self, label: str, members: list[MemberInfo]) -> dict[Any, str | None] | None:
        with_rack = [m.member_id for m in members if m.rack]
        if not with_rack:
            return None
        if len(with_rack) < len(members):
            without = sorted(m.member_id for m in members if not m.rack)
            message = (
                f"pool {label}: {len(without)} of {len(members)} member(s) have no rack"
                f" ({', '.join(without[:5])}{', ...' if len(without) > 5 else ''})"
            )
            if self.strict_racks:
                raise IncompleteRackInfoError(message + "; rack-aware assignment needs racks on all or none")
            log.warning("%s; placing this pool without racks", message)
            return None
        return {m.member_id: m.rack for m in members}
