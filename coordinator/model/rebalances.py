"""Rebalances as the runtime sees them: when each began and ended, how many tasks moved, how
balanced the result is.

The model is pure and says nothing of this; the runtime shows ``RebalanceWatch`` every group
it is about to write (each ``Persist``: every state change persists) and every group it
forgets. Comparing a group with what was seen last is enough to tell a rebalance began
(the group entered PreparingRebalance or AwaitingSync) or ended (it reached Stable at a new
generation, or Empty), at no cost on the heartbeat path, which writes nothing.

A replica *moved* when its owner (the instance id of a static member, else its member id)
differs from the last owner seen; a replica with no owner before does not count, and one
revoked in a cooperative generation counts once, when it lands elsewhere. Imbalance is
``assignors.metrics.balance`` of the stable assignment: what ``groups describe`` shows as
``balance``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import cast

from groupcoord.assignors.metrics import Members, balance
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.states import GroupState

__all__ = ["RebalanceWatch", "Rebalance", "Seen"]

S = GroupState
_task_id, _replica = attrgetter("task_id"), attrgetter("replica")
_REBALANCING = (S.PREPARING_REBALANCE, S.AWAITING_SYNC)


@dataclass(frozen=True, slots=True)
class Rebalance:
    """One finished rebalance."""

    group_id: str
    generation: int
    outcome: str  # "stable" | "empty"
    duration_s: float | None  # None when its start was not seen (it began before this process loaded the group)
    moved: int | None  # None when the owners before it are unknown


@dataclass(slots=True)
class Seen:
    """What the watch last saw of one group."""

    state: GroupState | None = None
    generation: int = -1
    started: float | None = None
    # last known owner of each replica (kept while a replica waits unassigned, e.g. being revoked)
    owners: dict[tuple[str, int], str] | None = None
    # assignment max/mean by replica count and by task weight, at the last Stable
    imbalance: tuple[float, float] | None = None


class RebalanceWatch:
    """Tracks each group from the runtime's writes; ``on_rebalance`` hears of each finished one."""

    def __init__(self, now: Callable[[], float], on_rebalance: Callable[[Rebalance], None]) -> None:
        self._now = now
        self._on_rebalance = on_rebalance
        self.groups: dict[str, Seen] = {}

    def changed(self, group: Group) -> None:
        """``group`` as it is about to be written (the end of a model step)."""
        seen = self.groups.get(group.group_id)
        if seen is None:
            seen = self.groups[group.group_id] = Seen()
        state = group.state
        if state in _REBALANCING:
            if seen.started is None:
                seen.started = self._now()
        elif state is S.STABLE and (seen.state is not S.STABLE or seen.generation != group.generation):
            owners = _owners(group)
            moved = None
            before = seen.owners
            if before is not None:
                last = before.get
                moved = sum([last(replica, owner) != owner for replica, owner in owners.items()])
                # replicas without an owner now keep their last one while their task is in the catalog
                tasks = group.tasks
                owners.update({r: before[r] for r in before.keys() - owners.keys() if r[0] in tasks})
            seen.owners = owners
            seen.imbalance = _imbalance(group)
            self._finish(group, seen, "stable", moved)
        elif state is S.EMPTY:
            seen.imbalance = None
            if seen.started is not None:
                self._finish(group, seen, "empty", None)
            if seen.owners is None:
                seen.owners = {}
        seen.state = state
        seen.generation = group.generation

    def forgotten(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    def keep_only(self, group_ids: Iterable[str]) -> None:
        """Drop what is known of groups no longer loaded (after the office changed hands)."""
        keep = set(group_ids)
        for group_id in [g for g in self.groups if g not in keep]:
            del self.groups[group_id]

    def _finish(self, group: Group, seen: Seen, outcome: str, moved: int | None) -> None:
        started, seen.started = seen.started, None
        duration = None if started is None else max(0.0, self._now() - started)
        self._on_rebalance(Rebalance(group.group_id, group.generation, outcome, duration, moved))


def _owners(group: Group) -> dict[tuple[str, int], str]:
    owners: dict[tuple[str, int], str] = {}
    members = group.members
    for member_id, replicas in group.assignment.items():
        member = members.get(member_id)
        owner = (member.instance_id or member_id) if member is not None else member_id
        owners.update(dict.fromkeys(zip(map(_task_id, replicas), map(_replica, replicas)), owner))
    return owners


def _imbalance(group: Group) -> tuple[float, float]:
    # ``balance`` reads only ``task_id`` and the list lengths: the wire replicas do, without a copy
    assignment = cast(Members, group.assignment)
    figures = balance(assignment, group.catalog_snapshot().weights())
    return figures.count_max_over_mean, figures.weight_max_over_mean
