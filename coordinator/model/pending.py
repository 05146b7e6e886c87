"""Member ids handed out with MEMBER_ID_REQUIRED and not yet joined with (the two-step join, KIP-394)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["PendingIds"]


class PendingIds:
    """Member ids handed out with MEMBER_ID_REQUIRED and not yet joined with, each tied to who asked
    (a principal, or the client's address when security is off): only it may join with the id, and
    each asker holds at most its share of the group's cap (counted here, O(1) per change)."""

    __slots__ = ("_held", "_owner")

    def __init__(self) -> None:
        self._owner: dict[str, str] = {}
        self._held: dict[str, int] = {}

    def add(self, member_id: str, owner: str) -> None:
        self.discard(member_id)
        self._owner[member_id] = owner
        self._held[owner] = self._held.get(owner, 0) + 1

    def discard(self, member_id: str) -> None:
        owner = self._owner.pop(member_id, None)
        if owner is not None:
            left = self._held[owner] - 1
            if left:
                self._held[owner] = left
            else:
                del self._held[owner]

    def owner(self, member_id: str) -> str | None:
        return self._owner.get(member_id)

    def held_by(self, owner: str) -> int:
        return self._held.get(owner, 0)

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._owner

    def __len__(self) -> int:
        return len(self._owner)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._owner))
