"""Assignment quality: balance, movement and rack spread, one definition for all callers.

Tests assert on these numbers, benchmarks print them and ``groups describe``
shows them, so they are computed in one place. Everything works on the plain
shape ``dict[member_id, list[TaskReplica]]`` (``Assignment.members``).

* **Balance**: replicas (and total task weight) per member, as max/mean
  (1.0 is perfect, 2.0 means the busiest member does twice its share) and
  min/max (1.0 is perfect, 0.0 means some member is idle while others work).
  With no replicas at all both ratios are 1.0: nothing is out of balance.
* **Movement**: replicas present in both assignments whose owner changed.
  New replicas (no previous owner) and dropped ones do not count.
* **Rack spread**: the share of tasks whose replicas sit on as many distinct
  racks as they can — ``min(replicas placed, racks available)``, racks
  available being those of the members of the task's pool when member pools
  are given, of all members otherwise. Members without a rack are ignored.

Worked example::

    >>> a = {"m1": [TaskReplica("t1"), TaskReplica("t2")], "m2": [TaskReplica("t3")]}
    >>> balance(a).count_max_over_mean, balance(a).count_min_over_max
    (1.3333333333333333, 0.5)
    >>> movement({"m1": [TaskReplica("t1")]}, {"m2": [TaskReplica("t1")]})
    1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica

__all__ = [
    "AssignmentQuality",
    "Balance",
    "balance",
    "moved_replicas",
    "movement",
    "owners",
    "rack_spread",
    "summarize",
    "summarize_context",
]

Members = Mapping[str, Sequence[TaskReplica]]


@dataclass(frozen=True, slots=True)
class Balance:
    """Per-member load figures: counts are replicas, weights are summed task weights."""

    members: int
    replicas: int
    count_max: int
    count_min: int
    count_mean: float
    count_max_over_mean: float
    count_min_over_max: float
    weight_max: float
    weight_min: float
    weight_mean: float
    weight_max_over_mean: float
    weight_min_over_max: float


@dataclass(frozen=True, slots=True)
class AssignmentQuality:
    """One assignment's quality in a form that prints, logs and serialises easily."""

    members: int
    replicas: int
    unassigned: int
    count_max_over_mean: float
    count_min_over_max: float
    weight_max_over_mean: float
    weight_min_over_max: float
    moved: int | None = None
    rack_spread: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def owners(assignment: Members) -> dict[TaskReplica, str]:
    """Replica -> member holding it."""
    return {replica: member for member, replicas in assignment.items() for replica in replicas}


def moved_replicas(previous: Members, current: Members) -> list[TaskReplica]:
    """Replicas held in both assignments by different members, sorted."""
    before = owners(previous)
    return sorted(
        replica for member, replicas in current.items() for replica in replicas if before.get(replica, member) != member
    )


def movement(previous: Members, current: Members) -> int:
    """How many replicas changed owner between ``previous`` and ``current``."""
    before = owners(previous)
    return sum(
        1 for member, replicas in current.items() for replica in replicas if before.get(replica, member) != member
    )


def _ratios(values: list[float]) -> tuple[float, float, float, float, float]:
    if not values:
        return 0.0, 0.0, 0.0, 1.0, 1.0
    high, low = max(values), min(values)
    mean = sum(values) / len(values)
    return high, low, mean, (high / mean if mean else 1.0), (low / high if high else 1.0)


def balance(assignment: Members, weights: Mapping[str, float] | None = None) -> Balance:
    """Balance of ``assignment``; ``weights`` maps task id -> weight (missing: 1.0, None: all 1.0)."""
    counts = [float(len(replicas)) for replicas in assignment.values()]
    if weights is None:
        loads = counts
    else:
        loads = [sum(weights.get(r.task_id, 1.0) for r in replicas) for replicas in assignment.values()]
    c_max, c_min, c_mean, c_max_mean, c_min_max = _ratios(counts)
    w_max, w_min, w_mean, w_max_mean, w_min_max = _ratios(loads)
    return Balance(
        members=len(counts),
        replicas=int(sum(counts)),
        count_max=int(c_max),
        count_min=int(c_min),
        count_mean=c_mean,
        count_max_over_mean=c_max_mean,
        count_min_over_max=c_min_max,
        weight_max=w_max,
        weight_min=w_min,
        weight_mean=w_mean,
        weight_max_over_mean=w_max_mean,
        weight_min_over_max=w_min_max,
    )


def rack_spread(
    assignment: Members,
    racks: Mapping[str, str],
    pools: Mapping[str, str] | None = None,
) -> float:
    """Share of tasks (0..1) whose replicas use ``min(replicas, racks available)`` distinct racks.

    ``racks`` maps member -> rack (members missing or with an empty rack are
    ignored); ``pools`` maps member -> pool, and a task's available racks are
    those of its holders' pool. 1.0 when no task has a replica on a racked member.
    """
    by_task: dict[str, list[str]] = {}
    for member, replicas in assignment.items():
        for replica in replicas:
            by_task.setdefault(replica.task_id, []).append(member)
    racks_in_pool: dict[str, set[str]] = {}
    for member in assignment:
        rack = racks.get(member)
        if rack:
            racks_in_pool.setdefault(pools.get(member, "") if pools else "", set()).add(rack)
    checked = spread = 0
    for holders in by_task.values():
        used = [racks[m] for m in holders if racks.get(m)]
        if not used:
            continue
        available = racks_in_pool.get(pools.get(holders[0], "") if pools else "", set())
        checked += 1
        spread += len(set(used)) >= min(len(used), len(available))
    return spread / checked if checked else 1.0


def summarize(
    assignment: Members,
    *,
    previous: Members | None = None,
    weights: Mapping[str, float] | None = None,
    racks: Mapping[str, str] | None = None,
    pools: Mapping[str, str] | None = None,
    unassigned: int = 0,
) -> AssignmentQuality:
    """All figures at once; ``moved`` and ``rack_spread`` stay None without their inputs."""
    b = balance(assignment, weights)
    return AssignmentQuality(
        members=b.members,
        replicas=b.replicas,
        unassigned=unassigned,
        count_max_over_mean=b.count_max_over_mean,
        count_min_over_max=b.count_min_over_max,
        weight_max_over_mean=b.weight_max_over_mean,
        weight_min_over_max=b.weight_min_over_max,
        moved=None if previous is None else movement(previous, assignment),
        rack_spread=rack_spread(assignment, racks, pools) if racks and any(racks.values()) else None,
    )


def summarize_context(context: AssignmentContext, assignment: Assignment) -> AssignmentQuality:
    """Quality of an assignor's answer, taking weights, racks, pools and the previous owners from the context."""
    previous: dict[str, list[TaskReplica]] = {}
    for replica, member in context.previous_owners().items():
        previous.setdefault(member, []).append(replica)
    return summarize(
        assignment.members,
        previous=previous,
        weights={t.task_id: t.weight for t in context.tasks},
        racks={m.member_id: m.rack for m in context.members},
        pools={m.member_id: m.pool for m in context.members},
        unassigned=len(assignment.unassigned),
    )
