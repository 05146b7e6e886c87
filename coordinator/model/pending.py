"""Member ids handed out with MEMBER_ID_REQUIRED and not yet joined with (the two-step join, KIP-394).

Each id is tied to who asked for it (a principal, or the client's address when security is off):
only it may join with the id. Each asker holds at most its share of the group's cap; an asker at
its share that asks again gives up its own oldest id (``oldest_of``), and a group at its cap gives
up its oldest id of all (``oldest``): a flood pushes out its own ids first, and a real client gets
an id at once, even behind the flooder's address (issue 38: refused for 60 s while a flood's ids,
asked for with 30-minute sessions, were kept instead). Memory stays bounded by the cap.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["PendingIds"]


class PendingIds:
    """The handed-out ids, by asker in the order they were handed out (O(1) per change)."""

    __slots__ = ("_by_owner", "_owner")

    def __init__(self) -> None:
        self._owner: dict[str, str] = {}
        self._by_owner: dict[str, dict[str, None]] = {}  # each asker's ids, oldest first

    def add(self, member_id: str, owner: str) -> None:
        self.discard(member_id)
        self._owner[member_id] = owner
        self._by_owner.setdefault(owner, {})[member_id] = None

    def discard(self, member_id: str) -> None:
        owner = self._owner.pop(member_id, None)
        if owner is not None:
            held = self._by_owner[owner]
            del held[member_id]
            if not held:
                del self._by_owner[owner]

    def owner(self, member_id: str) -> str | None:
        return self._owner.get(member_id)

    def held_by(self, owner: str) -> int:
        return len(self._by_owner.get(owner, ()))

    def oldest_of(self, owner: str) -> str | None:
        """The id ``owner`` was handed out first of those it still holds."""
        return next(iter(self._by_owner.get(owner, ())), None)

    def oldest(self) -> str | None:
        """The id handed out first of all those still held."""
        return next(iter(self._owner), None)

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._owner

    def __len__(self) -> int:
        return len(self._owner)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._owner))
