"""A group's catalog frozen at one version, for records written off the event loop."""

from __future__ import annotations

import base64

from google.protobuf.message import Message

from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CatalogSnapshot", "b64"]


def b64(message: Message) -> str:
    """A message as records keep it: base64 of its deterministic wire form."""
    return base64.b64encode(message.SerializeToString(deterministic=True)).decode("ascii")


class CatalogSnapshot:
    """A group's catalog as of one ``catalog_version``: a copy taken once per version on the loop
    (a dict of references), read by other threads (records, large answers, request checks).
    Anything derived from it is computed at most once, by whichever thread asks first."""

    __slots__ = ("_in_order", "_plain", "_serialised", "_weights", "tasks", "version")

    def __init__(self, version: int, tasks: dict[str, pb.Task]) -> None:
        self.version = version
        self.tasks = dict(tasks)  # the catalog's entries are replaced, never changed in place
        self._in_order: list[pb.Task] | None = None
        self._serialised: list[str] | None = None
        self._weights: tuple[dict[str, float] | None] | None = None
        self._plain: bool | None = None

    def in_order(self) -> list[pb.Task]:
        """The tasks sorted by id (how answers list them)."""
        done = self._in_order
        if done is None:
            tasks = self.tasks
            done = self._in_order = [tasks[t] for t in sorted(tasks)]
        return done

    def serialised(self) -> list[str]:
        """The tasks as records keep them, sorted by id."""
        done = self._serialised
        if done is None:
            done = self._serialised = [b64(task) for task in self.in_order()]
        return done

    def weights(self) -> dict[str, float] | None:
        """Each task's weight (unset counts 1.0), or None when every weight is 1.0: what
        ``assignors.metrics.balance`` takes, so a catalog of plain tasks is counted, not weighed."""
        done = self._weights
        if done is None:
            weights = {task_id: (task.weight or 1.0) for task_id, task in self.tasks.items()}
            done = self._weights = (None if all(w == 1.0 for w in weights.values()) else weights,)
        return done[0]

    def plain(self) -> bool:
        """Every task in the default pool with one replica and the same weight: what an incremental
        target needs to count rather than place (``assignors.incremental``)."""
        done = self._plain
        if done is None:
            weights = {task.weight or 1.0 for task in self.tasks.values()}
            done = self._plain = len(weights) <= 1 and all(
                task.replicas <= 1 and not task.pool for task in self.tasks.values())
        return done
