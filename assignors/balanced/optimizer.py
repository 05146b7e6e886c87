"""The goal-based optimizer behind ``balanced``: hard goals, a soft balance goal, a move cost.

Modelled on Cruise Control's goal optimizer, cut down to one resource:

- **hard goals** (never broken to improve balance): replicas of a task on distinct members,
  pools kept (the caller hands in one pool), and *capacity*: no move or placement may take a
  member above ``capacity_threshold`` of its capacity while the pool's mean is below it;
- **soft goal**: the utilization of the busiest member at most ``target_ratio`` x the mean, or
  the highest background alone if that is more (a member with a foreign process: the goal then
  is to take its tasks off, not to push everyone else below it);
- **move cost**: a move must lower the busier of its two ends by at least ``min_gain``
  (utilization), and a task never goes back to a member it was moved off within
  ``no_return_s`` (no oscillation).

Each step takes the busiest member over the goal that can give, and moves the one task that
lowers ``max(giver after, receiver after)`` the most — the task nearest half the gap between
them — so few moves reach the goal (heaviest-first when the gap is large, fine-grained at the
end). Replicas without an owner are placed first, heaviest first, each on the member it leaves
least utilized (a planned destination first, if it still qualifies).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from groupcoord.assignors.balanced.model import LoadView
from groupcoord.assignors.base import TaskReplica

__all__ = ["Bands", "Move", "PoolPlan", "place_unowned", "rebalance"]

#: Receivers considered per giver: the least utilized few (the best receiver is almost always among them),
#: and, in a pool of at most this many capacities, the least utilized of each capacity (a member twice as
#: large rises half as much per task: it may be the best receiver from behind a tie of smaller ones).
RECEIVERS = 8

_NOBODY: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Move:
    replica: TaskReplica
    source: str
    destination: str


@dataclass
class PoolPlan:
    """One pool's members, who owns what, and each member's absolute load (background included)."""

    view: LoadView
    members: list[str]
    owners: dict[TaskReplica, str]
    load: dict[str, float] = field(default_factory=dict)
    owned: dict[str, set[TaskReplica]] = field(default_factory=dict)
    holders: dict[str, set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        background, task_load = self.view.background, self.view.task_load
        load = self.load = {m: background.get(m, 0.0) for m in self.members}
        owned: dict[str, set[TaskReplica]] = {m: set() for m in self.members}
        self.owned = owned
        holders = self.holders
        # ``add`` for each owned replica, inlined (100,000 of them at scale), in the same order: the
        # same loads to the last bit
        for replica, member in self.owners.items():
            owned[member].add(replica)
            load[member] += task_load.get(replica.task_id, 0.0)
            held = holders.get(replica.task_id)
            if held is None:
                holders[replica.task_id] = {member}
            else:
                held.add(member)

    def add(self, replica: TaskReplica, member: str) -> None:
        self.owners[replica] = member
        self.owned[member].add(replica)
        self.load[member] += self.view.task_load.get(replica.task_id, 0.0)
        self.holders.setdefault(replica.task_id, set()).add(member)

    def remove(self, replica: TaskReplica, owner: str | None = None) -> str:
        """Take ``replica`` off its member (``owner``, when the caller knows it); returns that member."""
        member = self.owners.pop(replica, owner)
        if member is None:
            raise KeyError(replica)
        self.owned[member].discard(replica)
        self.load[member] -= self.view.task_load.get(replica.task_id, 0.0)
        self.holders[replica.task_id].discard(member)
        return member

    def util(self, member: str) -> float:
        return self.load[member] / self.view.capacity[member]

    def mean_util(self) -> float:
        return sum(self.util(m) for m in self.members) / len(self.members) if self.members else 0.0

    def busiest(self) -> float:
        """Utilization of the busiest member that owns something (0 if none does)."""
        return max((self.util(m) for m in self.members if self.owned[m]), default=0.0)

    def floor(self) -> float:
        """The utilization no assignment can avoid: the highest background alone."""
        return max((self.view.background.get(m, 0.0) / self.view.capacity[m] for m in self.members), default=0.0)

    def move(self, replica: TaskReplica, destination: str, source: str | None = None) -> Move:
        source = self.remove(replica, source)
        self.add(replica, destination)
        return Move(replica, source, destination)


class _LeastUtilized:
    """The least utilized members of a plan, from heaps with lazily dropped stale entries: one of every
    member, and one per capacity when the pool has 2 to ``RECEIVERS`` capacities (see ``RECEIVERS``)."""

    def __init__(self, plan: PoolPlan) -> None:
        self.plan = plan
        self.heap = [(plan.util(m), m) for m in plan.members]
        heapq.heapify(self.heap)
        by_capacity: dict[float, list[tuple[float, str]]] = {}
        for entry in self.heap:
            by_capacity.setdefault(plan.view.capacity[entry[1]], []).append(entry)
        self.by_capacity = by_capacity if 1 < len(by_capacity) <= RECEIVERS else {}
        for heap in self.by_capacity.values():
            heapq.heapify(heap)

    def lowest(self, k: int, exclude: set[str]) -> list[str]:
        """The ``k`` least utilized not in ``exclude``, then the least utilized of each capacity, if not
        among them."""
        found = self._take(self.heap, k, exclude)
        for heap in self.by_capacity.values():
            least = self._least(heap, exclude)
            if least is not None and least not in found:
                found.append(least)
        return found

    def _least(self, heap: list[tuple[float, str]], exclude: set[str]) -> str | None:
        """``_take(heap, 1, exclude)``, read off the top when it is current and not excluded (the
        common case: no pop and push per placement)."""
        while heap and heap[0][0] != self.plan.util(heap[0][1]):
            heapq.heappop(heap)  # stale: the member's load changed since (a fresh entry was pushed)
        if heap and heap[0][1] not in exclude:
            return heap[0][1]
        taken = self._take(heap, 1, exclude)
        return taken[0] if taken else None

    def _take(self, heap: list[tuple[float, str]], k: int, exclude: set[str]) -> list[str]:
        found: list[str] = []
        kept: list[tuple[float, str]] = []
        seen: set[str] = set()
        while heap and len(found) < k:
            entry = heapq.heappop(heap)
            util, member = entry
            if util != self.plan.util(member) or member in seen:
                continue  # stale (the member's load changed since) or a duplicate
            seen.add(member)
            kept.append(entry)
            if member not in exclude:
                found.append(member)
        for entry in kept:
            heapq.heappush(heap, entry)
        return found

    def changed(self, member: str) -> None:
        entry = (self.plan.util(member), member)
        heapq.heappush(self.heap, entry)
        if self.by_capacity:
            heapq.heappush(self.by_capacity[self.plan.view.capacity[member]], entry)


def place_unowned(
    plan: PoolPlan, replicas: list[TaskReplica], planned: Mapping[TaskReplica, str], capacity_threshold: float
) -> dict[TaskReplica, str]:
    """Place ``replicas`` (heaviest first); returns those no member could take, with the reason.

    Each goes to the member it leaves least utilized among the ``RECEIVERS`` least utilized ones
    (all of them in a pool that small) and the least utilized of each capacity, or to its planned
    member if that keeps the capacity goal.
    """
    unplaced: dict[TaskReplica, str] = {}
    if not replicas:
        return unplaced  # nothing to place: no heap of every member to build (a join places nothing)
    if plan.members and plan.mean_util() >= capacity_threshold:
        capacity_threshold = float("inf")  # the capacity goal holds only while the mean is below it
    order = sorted(replicas, key=lambda r: (-plan.view.task_load.get(r.task_id, 0.0), r))
    least = _LeastUtilized(plan)
    for replica in order:
        taken = plan.holders.get(replica.task_id, set())
        free = least.lowest(RECEIVERS, taken)
        if not free:
            unplaced[replica] = f"replication factor exceeds the {len(plan.members)} member(s) of the pool"
            continue
        load = plan.view.task_load.get(replica.task_id, 0.0)

        def after(m: str, load: float = load) -> float:
            return (plan.load[m] + load) / plan.view.capacity[m]

        best = min(free, key=lambda m: (after(m), m))
        target = planned.get(replica, best)
        if target not in plan.load or target in taken or after(target) > capacity_threshold >= after(best):
            target = best
        plan.add(replica, target)
        least.changed(target)
    return unplaced


@dataclass(frozen=True, slots=True)
class Bands:
    """Utilization lines for one pool: the soft goal, the hit line and the act-at-once line.

    ``ratio x mean`` each; when a member's background alone is above the goal (a foreign process),
    that floor is the goal and the other lines sit a quarter of their usual distance above it.
    """

    goal: float
    trigger: float
    urgent: float

    @classmethod
    def of(cls, plan: PoolPlan, target_ratio: float, trigger_ratio: float, urgent_ratio: float) -> Bands:
        mean, floor = plan.mean_util(), plan.floor()
        goal = max(target_ratio * mean, floor)
        squeeze = 1.0 if floor <= target_ratio * mean else 0.25
        return cls(
            goal=goal,
            trigger=goal + (trigger_ratio - target_ratio) * mean * squeeze,
            urgent=goal + (urgent_ratio - target_ratio) * mean * squeeze,
        )


def rebalance(
    plan: PoolPlan,
    *,
    target_ratio: float,
    capacity_threshold: float,
    min_gain: float,
    allowed: Callable[[str, str], bool],
    max_moves: int = 0,
) -> list[Move]:
    """Moves (applied to ``plan``) until the soft goal holds or no move pays its cost.

    ``allowed(task_id, member)`` is the no-return rule; ``max_moves`` 0 means no limit.
    """
    moves: list[Move] = []
    if not plan.members:
        return moves
    # A move shifts load between two members, so the mean utilization changes only through their
    # capacities: keep the sum up to date instead of recomputing it (large pools, many moves).
    util = {m: plan.util(m) for m in plan.members}
    total = sum(util.values())
    floor = plan.floor()
    # Members by load, both ways, in heaps with lazy invalidation: a move changes two members'
    # utilization, so each step pushes two fresh entries instead of sorting every member again
    # (10,000 members, thousands of moves). An entry is current while its version is.
    version = dict.fromkeys(plan.members, 0)
    by_most: list[tuple[float, str, int]] = [(-u, m, 0) for m, u in util.items()]
    heapq.heapify(by_most)
    by_least = _Receivers(plan, util, version)
    while not max_moves or len(moves) < max_moves:
        mean = total / len(plan.members)
        goal = max(target_ratio * mean, floor)
        hard = mean < capacity_threshold
        ceiling = capacity_threshold if hard else float("inf")
        line = min(goal, capacity_threshold) if hard else goal
        lowest = by_least.lowest()
        step = None
        looked: list[tuple[float, str, int]] = []  # current entries popped off ``by_most``, pushed back after
        while by_most:
            entry = heapq.heappop(by_most)
            _, giver, seen = entry
            if seen != version[giver]:
                continue  # stale: the member's load changed since
            looked.append(entry)
            if util[giver] <= line:
                break  # the busiest left is not busy: nobody after it is
            if not plan.owned[giver]:
                continue
            if util[giver] <= goal and not (hard and util[giver] > capacity_threshold):
                continue
            receivers = by_least.without(lowest, giver)
            step = _best_move(plan, giver, receivers, ceiling, min_gain, allowed)
            if step is not None:
                break
        for entry in looked:
            heapq.heappush(by_most, entry)
        if step is None:
            break
        replica, receiver = step
        source = giver  # the step moves one of the giver's replicas
        moves.append(plan.move(replica, receiver, source))
        for member in (source, receiver):
            total += plan.util(member) - util[member]
            util[member] = plan.util(member)
            version[member] += 1
            heapq.heappush(by_most, (-util[member], member, version[member]))
            by_least.changed(member, util[member])
    return moves


class _Receivers:
    """The members a giver may give to: the ``RECEIVERS`` least utilized, and the least utilized of each
    capacity when the pool has at most ``RECEIVERS`` capacities (heaps with lazy invalidation: an entry
    is current while its member's ``version`` is)."""

    def __init__(self, plan: PoolPlan, util: Mapping[str, float], version: dict[str, int]) -> None:
        self.version = version
        self.capacity = plan.view.capacity
        self.all: list[tuple[float, str, int]] = [(u, m, 0) for m, u in util.items()]
        heapq.heapify(self.all)
        by_capacity: dict[float, list[tuple[float, str, int]]] = {}
        for member, u in util.items():
            by_capacity.setdefault(self.capacity[member], []).append((u, member, 0))
        # one capacity: the overall heap is that capacity's; many: too many to look at on every step
        self.by_capacity = by_capacity if 1 < len(by_capacity) <= RECEIVERS else {}
        for heap in self.by_capacity.values():
            heapq.heapify(heap)

    def lowest(self) -> tuple[list[str], list[list[str]]]:
        """The least utilized ``RECEIVERS + 1`` overall, and the two least utilized of each capacity
        (one more than needed each: the giver is left out afterwards)."""
        overall = [m for _, m, _ in _first(self.all, self.version, RECEIVERS + 1)]
        each = [[m for _, m, _ in _first(heap, self.version, 2)] for heap in self.by_capacity.values()]
        return overall, each

    @staticmethod
    def without(lowest: tuple[list[str], list[list[str]]], giver: str) -> list[str]:
        """The receivers for ``giver``: the ``RECEIVERS`` least utilized others, then the least utilized
        other of each capacity, if not among them."""
        overall, each = lowest
        receivers = [m for m in overall if m != giver][:RECEIVERS]
        for of_capacity in each:
            least = next((m for m in of_capacity if m != giver), None)
            if least is not None and least not in receivers:
                receivers.append(least)
        return receivers

    def changed(self, member: str, util: float) -> None:
        entry = (util, member, self.version[member])
        heapq.heappush(self.all, entry)
        if self.by_capacity:
            heapq.heappush(self.by_capacity[self.capacity[member]], entry)


def _first(heap: list[tuple[float, str, int]], version: dict[str, int], count: int) -> list[tuple[float, str, int]]:
    """The ``count`` least current entries of ``heap`` in order (stale ones dropped, the rest kept)."""
    found: list[tuple[float, str, int]] = []
    while heap and len(found) < count:
        entry = heapq.heappop(heap)
        if entry[2] == version[entry[1]]:
            found.append(entry)
    for entry in found:
        heapq.heappush(heap, entry)
    return found


def _best_move(
    plan: PoolPlan,
    giver: str,
    receivers: list[str],
    ceiling: float,
    min_gain: float,
    allowed: Callable[[str, str], bool],
) -> tuple[TaskReplica, str] | None:
    """The move off ``giver`` that leaves the lower ``max(giver, receiver)``, if it gains ``min_gain``."""
    start = plan.util(giver)
    best: tuple[float, float, TaskReplica, str] | None = None
    capacity, task_load, holders = plan.view.capacity, plan.view.task_load, plan.holders
    giver_cap, giver_load = capacity[giver], plan.load[giver]
    # the receivers' figures looked up once per step, not once per replica (thousands of steps at scale)
    targets = [(receiver, plan.load[receiver], capacity[receiver]) for receiver in receivers]
    for replica in sorted(plan.owned[giver]):
        load = task_load.get(replica.task_id, 0.0)
        if load <= 0:
            continue
        giver_after = (giver_load - load) / giver_cap
        holding = holders.get(replica.task_id, _NOBODY)
        for receiver, receiver_load, receiver_cap in targets:
            if receiver in holding:
                continue
            receiver_after = (receiver_load + load) / receiver_cap
            if receiver_after > ceiling:
                continue
            peak = max(giver_after, receiver_after)
            if start - peak < min_gain:
                continue
            # the no-return rule (a call) last, and only for a move that would be the best so far:
            # every test is a filter, so the best move that passes them all is the same
            key = (peak, load, replica, receiver)
            if (best is None or key < best) and allowed(replica.task_id, receiver):
                best = key
    return None if best is None else (best[2], best[3])
