"""What the service runs, and what it is told when that changes.

Eager protocol: everything is revoked before each re-join, and each generation's tasks are
assigned whole. Cooperative protocol (KIP-429): an assignment is a diff against what runs:
``on_revoked`` with the tasks that move away, ``on_assigned`` with the new ones; the rest run
on. A member that revoked something re-joins at once, so the freed tasks reach their new
owners in the next generation. Tasks lost without a clean revoke go to ``on_lost``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from groupcoord.assignors.base import TaskReplica
from groupcoord.worker.listener import LostListener

__all__ = ["Notice", "Ownership"]

log = logging.getLogger("groupcoord.worker")

Callback = Literal["on_assigned", "on_revoked", "on_lost"]


@dataclass(frozen=True)
class Notice:
    """What the service must be told: ``callback`` with ``tasks`` (and the generation, when assigned).

    Also what ``AsyncWorkerClient.changes()`` yields: ``kind`` is "assigned", "revoked" or "lost"."""

    callback: Callback
    tasks: tuple[TaskReplica, ...]
    generation: int = -1

    @property
    def kind(self) -> str:
        return self.callback.removeprefix("on_")

    def call(self, listener: object) -> object:
        """Call ``listener``'s method for this notice (a listener without ``on_lost`` gets ``on_revoked``);
        returns what it returns (a coroutine, for an async listener)."""
        if self.callback == "on_assigned":
            return listener.on_assigned(self.tasks, self.generation)  # type: ignore[attr-defined]
        if self.callback == "on_lost" and isinstance(listener, LostListener):
            lost: object = getattr(listener, "on_lost")(self.tasks)  # noqa: B009 - may be a coroutine
            return lost
        return listener.on_revoked(self.tasks)  # type: ignore[attr-defined]


class Ownership:
    """The tasks this worker runs (``assigned``) and reports owning when it joins (``owned``)."""

    def __init__(self, emit: Callable[[Notice], None], *, name: str,
                 on_set: Callable[[], None] | None = None) -> None:
        self._emit = emit  # the member core queues them; its driver delivers them where the core says
        self._on_set = on_set  # after every change of ``assigned`` (the threaded driver wakes its waiters)
        self._name = name
        self.assigned: tuple[TaskReplica, ...] = ()
        # reported when joining: the last assignment (eager: kept after revoking, for stickiness;
        # cooperative: what runs), and the generation it came from
        self.owned: tuple[TaskReplica, ...] = ()
        self.owned_generation = -1

    def apply(self, tasks: Sequence[TaskReplica], generation: int, *, cooperative: bool) -> tuple[TaskReplica, ...]:
        """A generation's assignment arrived; returns the tasks revoked by it (cooperative only)."""
        before = self.assigned
        revoked: tuple[TaskReplica, ...] = ()
        added = tuple(tasks)
        if cooperative:
            keep = set(tasks)
            revoked = tuple(t for t in before if t not in keep)
            had = set(before)
            added = tuple(t for t in tasks if t not in had)
            if revoked:
                self._set(tuple(t for t in before if t in keep))
                self._emit(Notice("on_revoked", revoked))
        self._set(tuple(tasks))
        self.owned = tuple(tasks)
        self.owned_generation = generation
        log.info("%s: generation %d: assigned %s%s", self._name, generation,
                 ", ".join(str(t) for t in tasks) or "nothing",
                 f" (new: {', '.join(map(str, added)) or 'none'}; revoked: {', '.join(map(str, revoked)) or 'none'})"
                 if cooperative else "")
        self._emit(Notice("on_assigned", added, generation))
        return revoked

    def revoke_all(self) -> None:
        """Stop everything cleanly (eager re-join, close)."""
        tasks = self.assigned
        if tasks:
            self._set(())
            self._emit(Notice("on_revoked", tasks))

    def lose_all(self) -> None:
        """Everything is gone without a clean handover (``on_lost``, else ``on_revoked``)."""
        tasks = self.assigned
        if not tasks:
            return
        self._set(())
        self.owned = ()
        self.owned_generation = -1
        self._emit(Notice("on_lost", tasks))

    def _set(self, tasks: tuple[TaskReplica, ...]) -> None:
        self.assigned = tasks
        if self._on_set is not None:
            self._on_set()
