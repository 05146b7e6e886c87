"""Per-group state an assignor keeps between rounds, held for a bounded number of groups.

The load-aware assignors remember, per group, what they learned (load estimates, recent moves,
an incremental target's basis). One assignor instance serves every group of a coordinator, and
groups come and go (a tenant can make many), so that memory is kept for the ``limit`` groups used
most recently; a group whose state was dropped gets a full pass on its next round, as a new one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["DEFAULT_GROUPS_KEPT", "GroupStates"]

#: Groups whose state one assignor instance keeps (a dropped state only costs the next round a full pass).
DEFAULT_GROUPS_KEPT = 1024

S = TypeVar("S")


class GroupStates(Generic[S]):
    """``group id -> state``, made on first use, the least recently used dropped past ``limit``."""

    def __init__(self, make: Callable[[], S], limit: int = DEFAULT_GROUPS_KEPT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._make = make
        self._limit = limit
        self._states: OrderedDict[str, S] = OrderedDict()

    def get(self, group_id: str) -> S:
        """The group's state (made now if it has none), marked as the most recently used."""
        state = self._states.get(group_id)
        if state is None:
            state = self._states[group_id] = self._make()
            while len(self._states) > self._limit:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(group_id)
        return state

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._states

    def __len__(self) -> int:
        return len(self._states)
