"""A consumer group's target that remembers which members' targets changed since it was last written.

The group's record is written per member (``coordinator.model.consumer_records``): a change of k
members' targets writes k target records, not the group's. Every way the model changes a target
(an item set, popped or deleted, or the whole map replaced by a new computation) goes through
this map, so the record cannot miss one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import compress
from operator import is_not
from typing import Any, NoReturn

from groupcoord.assignors.base import TaskReplica

__all__ = ["TargetMap"]

Tasks = frozenset[TaskReplica]


class TargetMap(dict[str, Tasks]):
    """member id -> target; ``changed``: the members whose target changed (or went) since ``drain``."""

    __slots__ = ("changed",)

    def __init__(self, items: Mapping[str, Tasks] | Iterable[tuple[str, Tasks]] = ()) -> None:
        super().__init__(items)
        self.changed: set[str] = set(self)

    @classmethod
    def replacing(cls, old: Mapping[str, Tasks] | None, new: Mapping[str, Tasks]) -> TargetMap:
        """``new`` in place of ``old``: only the members whose set differs count as changed (a new
        computation keeps the unchanged members' sets, so most compare by identity)."""
        if old is None:
            return cls(new)
        made = cls.__new__(cls)
        dict.__init__(made, new)
        changed = set(old.changed) if isinstance(old, TargetMap) else set()
        # the members whose set is not the same object, found in C (a handful of 10,000), then compared
        for member_id in compress(old, map(is_not, map(made.get, old), old.values())):
            now = made.get(member_id)
            if now is None or now != old[member_id]:
                changed.add(member_id)
        changed.update(made.keys() - old.keys())
        made.changed = changed
        return made

    def drain(self) -> set[str]:
        """The members changed since the last call (a write takes them)."""
        changed, self.changed = self.changed, set()
        return changed

    def __setitem__(self, member_id: str, tasks: Tasks) -> None:
        self.changed.add(member_id)
        super().__setitem__(member_id, tasks)

    def __delitem__(self, member_id: str) -> None:
        self.changed.add(member_id)
        super().__delitem__(member_id)

    def pop(self, member_id: str, *default: Any) -> Any:
        self.changed.add(member_id)
        return super().pop(member_id, *default)

    def _untracked(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("a group's target changes item by item (or is replaced whole): the record tracks them")

    update = setdefault = popitem = clear = __ior__ = _untracked
