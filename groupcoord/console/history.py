"""Rebalances as the console saw them: each new generation, why it likely came, and what moved.

The admin API answers the group as it is now (DescribeGroup); it keeps no history. The console
compares each description it fetches with the previous one of the same group: a new generation is
a rebalance, the members that left or joined and the catalog change are its likely reasons, and
the replicas whose owner changed are what it moved. So the history starts when the console first
looks at a group, and a rebalance that happened between two looks is folded into one entry.

Pure: descriptions and clock readings in, entries out. Bounded: ``max_groups`` groups (the least
recently seen forgotten first) and ``max_entries`` entries each.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.metrics import moved_replicas

__all__ = ["Observation", "Rebalance", "RebalanceHistory"]

Members = Mapping[str, Sequence[TaskReplica]]

MOVES_KEPT = 20
"""Replicas named per entry (the count is always whole)."""


@dataclass(frozen=True)
class Observation:
    """What the console needs of one DescribeGroup to compare it with the next."""

    generation: int
    assignment: Members
    client_ids: Mapping[str, str]
    tasks: frozenset[str]
    last_error: str = ""


@dataclass(frozen=True)
class Rebalance:
    """One new generation seen: from which, when (wall clock, s), why, and what moved."""

    from_generation: int
    generation: int
    seen_at: float
    reasons: tuple[str, ...]
    moved: int
    moved_sample: tuple[str, ...]


def _names(ids: Sequence[str], client_ids: Mapping[str, str], most: int = 3) -> str:
    shown = [client_ids.get(i) or i for i in ids[:most]]
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return ", ".join(shown) + more


def reasons(before: Observation, after: Observation) -> tuple[str, ...]:
    """The changes between two looks that start a rebalance, in words."""
    found = []
    left = sorted(set(before.assignment) - set(after.assignment))
    joined = sorted(set(after.assignment) - set(before.assignment))
    if left:
        found.append(f"{len(left)} member(s) left or expired: {_names(left, before.client_ids)}")
    if joined:
        found.append(f"{len(joined)} member(s) joined: {_names(joined, after.client_ids)}")
    added, removed = len(after.tasks - before.tasks), len(before.tasks - after.tasks)
    if added or removed:
        found.append(f"task catalog changed: +{added} -{removed}")
    if after.last_error and after.last_error != before.last_error:
        found.append(f"rebalance failure: {after.last_error}")
    if not found:
        found.append("a member re-joined (new metadata, a restart, or a coordinator failover)")
    return tuple(found)


def _merged(kept: Observation, seen: Observation) -> Observation:
    """Two looks at one generation as one: every member seen in it, each with the tasks it was last seen
    running (a look during AwaitingSync shows none yet), the catalog and error as the generation began."""
    assignment = dict(kept.assignment)
    for member, tasks in seen.assignment.items():
        if tasks or member not in assignment:
            assignment[member] = tasks
    return Observation(kept.generation, assignment, {**kept.client_ids, **seen.client_ids}, kept.tasks,
                       kept.last_error)


def _entry(before: Observation, after: Observation, seen_at: float) -> Rebalance:
    moved = moved_replicas(before.assignment, after.assignment)
    sample = tuple(r.task_id if r.replica == 0 else f"{r.task_id}#{r.replica}" for r in moved[:MOVES_KEPT])
    return Rebalance(before.generation, after.generation, seen_at, reasons(before, after), len(moved), sample)


class RebalanceHistory:
    """Per group, the rebalances seen (newest first), and the last two generations as seen so far."""

    def __init__(self, *, max_groups: int = 1_000, max_entries: int = 20) -> None:
        self._looks: OrderedDict[str, tuple[Observation | None, Observation]] = OrderedDict()
        self._entries: dict[str, deque[Rebalance]] = {}
        self._max_groups = max_groups
        self._max_entries = max_entries

    def observe(self, group_id: str, seen: Observation, now: float) -> Rebalance | None:
        """Fold ``seen`` into the group's looks; the new entry, if the generation moved on. Later looks at
        the same generation refine its entry (what moved is known once the members have their tasks)."""
        previous, current = self._looks.pop(group_id, (None, None))
        self._looks[group_id] = (previous, seen)
        while len(self._looks) > self._max_groups:
            forgotten, _ = self._looks.popitem(last=False)
            self._entries.pop(forgotten, None)
        if current is None or seen.generation < current.generation:  # first look, or the group was recreated
            self._entries.pop(group_id, None)
            self._looks[group_id] = (None, seen)
            return None
        entries = self._entries.setdefault(group_id, deque(maxlen=self._max_entries))
        if seen.generation == current.generation:
            current = _merged(current, seen)
            self._looks[group_id] = (previous, current)
            if previous is not None and entries and entries[0].generation == current.generation:
                entries[0] = _entry(previous, current, entries[0].seen_at)
            return None
        self._looks[group_id] = (current, seen)
        entry = _entry(current, seen, now)
        entries.appendleft(entry)
        return entry

    def entries(self, group_id: str) -> list[Rebalance]:
        """Newest first."""
        return list(self._entries.get(group_id, ()))

    def last(self, group_id: str) -> Rebalance | None:
        entries = self._entries.get(group_id)
        return entries[0] if entries else None

    def __len__(self) -> int:
        return len(self._looks)
