"""What the handlers see of the model: its settings, its clock and its groups.

A Protocol, so the handler modules (``join``, ``sync``, ``membership``, ``admin``,
``phases``) depend on this small surface and the model depends on them, never the
other way round.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from groupcoord.coordinator.clock import Clock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Model"]


class Model(Protocol):
    config: CoordinatorConfig
    clock: Clock
    groups: dict[str, Group]

    def new_member_id(self, name: str) -> str:
        """A new member's id, unique, made from its instance or client id."""
        ...

    def account_of(self, group_id: str, creator: str) -> str:
        """Whose quotas a group ``creator`` creates counts against (the principal administering its
        name, when the coordinator knows one: ``coordinator.auth.prefix_owner``; else ``creator``)."""
        ...

    def lateness(self) -> float:
        """Seconds this coordinator could not run (its event loop ran late), accumulated."""
        ...

    def bulk(self) -> AbstractContextManager[None]:
        """Around a step's part that touches every member of a group once (a phase's completion):
        whatever the runtime does for such bursts (it holds the cycle collector off), else nothing."""
        ...

    def new_group(self, group_id: str, creator: str = "", founder: str = "") -> Group:
        """An Empty group, added to the state machine; ``creator``'s quotas count it (its account);
        ``founder``: the principal whose call created it, if another."""
        ...

    def created_by(self, principal: str) -> set[str]:
        """The ids of the groups ``principal`` created (its quotas: groups, catalog tasks)."""
        ...

    def drop_group(self, group: Group) -> None:
        """Mark the group Dead and forget it."""
        ...

    def check_group_id(self, group_id: str) -> pb.Error | None:
        """INVALID_GROUP_ID for an id no group may have."""
        ...

    def check_member(self, group: Group, member_id: str, instance_id: str) -> pb.Error | None:
        """Kafka's validateCurrentMember."""
        ...

    def find_member(
        self, group_id: str, member_id: str, generation: int | None, instance_id: str = ""
    ) -> tuple[Group | None, Member | None, pb.Error | None]:
        """The group and member a request names, or the error that answers it."""
        ...
