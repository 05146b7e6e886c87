"""What the service runs, and what it is told when that changes.

Eager protocol: everything is revoked before each re-join, and each generation's tasks are
assigned whole. Cooperative protocol (KIP-429): an assignment is a diff against what runs:
``on_revoked`` with the tasks that move away, ``on_assigned`` with the new ones; the rest run
on. A member that revoked something re-joins at once, so the freed tasks reach their new
owners in the next generation. Tasks lost without a clean revoke go to ``on_lost``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from groupcoord.assignors.base import TaskReplica
from groupcoord.worker.listener import LostListener, TaskListener

__all__ = ["Ownership"]

log = logging.getLogger("groupcoord.worker")


class Ownership:
    """The tasks this worker runs (``assigned``) and reports owning when it joins (``owned``)."""

    def __init__(self, listener: TaskListener, cond: threading.Condition, *, name: str) -> None:
        self._listener = listener
        self._cond = cond
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
                self.notify("on_revoked", lambda: self._listener.on_revoked(revoked))
        self._set(tuple(tasks))
        self.owned = tuple(tasks)
        self.owned_generation = generation
        log.info("%s: generation %d: assigned %s%s", self._name, generation,
                 ", ".join(str(t) for t in tasks) or "nothing",
                 f" (new: {', '.join(map(str, added)) or 'none'}; revoked: {', '.join(map(str, revoked)) or 'none'})"
                 if cooperative else "")
        self.notify("on_assigned", lambda: self._listener.on_assigned(added, generation))
        return revoked

    def revoke_all(self) -> None:
        """Stop everything cleanly (eager re-join, close)."""
        tasks = self.assigned
        if tasks:
            self._set(())
            self.notify("on_revoked", lambda: self._listener.on_revoked(tasks))

    def lose_all(self) -> None:
        """Everything is gone without a clean handover (``on_lost``, else ``on_revoked``)."""
        tasks = self.assigned
        if not tasks:
            return
        self._set(())
        self.owned = ()
        self.owned_generation = -1
        listener = self._listener
        if isinstance(listener, LostListener):
            self.notify("on_lost", lambda: listener.on_lost(tasks))
        else:
            self.notify("on_revoked", lambda: listener.on_revoked(tasks))

    def _set(self, tasks: tuple[TaskReplica, ...]) -> None:
        with self._cond:
            self.assigned = tasks
            self._cond.notify_all()

    def notify(self, callback: str, call: Callable[[], object]) -> None:
        """Call the listener; an exception is logged, never fatal."""
        try:
            call()
        except Exception:
            log.exception("%s: listener %s raised; carrying on", self._name, callback)
