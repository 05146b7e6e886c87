"""The runtime's one seam for listeners that act on what it carries out (the Session streams' news).

A watcher is told, on the event loop, when a group's record has landed in the store with no newer
write queued behind it (a change the group's members may want to hear of at once: never one a failed
write then rolls back), and when the runtime unloads its groups (its shard left this process, its
term ended, or the process stops coordinating them). It must not raise and must not change the
group: it reads, and queues what it wants to say.
"""

from __future__ import annotations

from typing import Any, Protocol

from groupcoord.coordinator.model.group import Group

__all__ = ["GroupWatcher"]


class GroupWatcher(Protocol):
    def changed(self, runtime: Any, group: Group) -> None:
        """``group`` (of ``runtime``, a ``CoordinatorRuntime``) changed, and its record as it now is landed."""
        ...

    def unloaded(self, runtime: Any) -> None:
        """``runtime`` no longer answers for the groups it had (they are gone from it)."""
        ...
