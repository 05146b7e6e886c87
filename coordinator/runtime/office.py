"""Whether this process may act as the coordinator: the one object HA injects.

The runtime asks ``in_office()`` before every request and before any timer fires; when the
answer or the ``term()`` changes it unloads every group, or loads them for the new term (an
HA election win). A standalone coordinator is always in office, in term 0. ``stand_down`` is
how the runtime says it could not serve this term (its store fenced a write, loading failed).
A sharded process has one runtime per shard, each with its shard's office
(``coordinator.ha.shard_election.ShardOffice``), which also hands its shard over (``HandOver``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["HandOver", "Office", "Standalone"]


class Office(Protocol):
    def in_office(self) -> bool:
        """May this process act as the active coordinator right now? Cheap; asked per request."""
        ...

    def term(self) -> int:
        """Changes each time this process is (re-)elected; groups are reloaded for a new term."""
        ...

    def active_address(self) -> str:
        """Where the active coordinator is ("" when unknown), for NOT_COORDINATOR hints."""
        ...

    def watch(self, on_change: Callable[[], object]) -> None:
        """Call ``on_change`` (from any thread) whenever the verdict or the term may have changed."""
        ...

    def stand_down(self) -> None:
        """The runtime could not serve this term (fenced write, failed load): look again."""
        ...


@runtime_checkable
class HandOver(Protocol):
    """An office that hands its shard over gracefully (``coordinator.ha.shard_election``): it leaves
    office first, and releases the shard's election only once told the runtime has unloaded it and
    has no store write in flight."""

    def drained(self) -> None:
        """The runtime is out of office for this shard and its last write has landed (any thread)."""
        ...


class Standalone:
    """The only coordinator there is: always in office, one term, nothing to watch."""

    def in_office(self) -> bool:
        return True

    def term(self) -> int:
        return 0

    def active_address(self) -> str:
        return ""

    def watch(self, on_change: Callable[[], object]) -> None:
        pass

    def stand_down(self) -> None:
        pass
