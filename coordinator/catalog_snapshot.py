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
    """A group's catalog as of one ``catalog_version``, serialised at most once and off the loop."""

    __slots__ = ("_serialised", "_tasks", "version")

    def __init__(self, version: int, tasks: dict[str, pb.Task]) -> None:
        self.version = version
        self._tasks = dict(tasks)  # the catalog's entries are replaced, never changed in place
        self._serialised: list[str] | None = None

    def serialised(self) -> list[str]:
        done = self._serialised
        if done is None:
            tasks = self._tasks
            done = self._serialised = [b64(tasks[t]) for t in sorted(tasks)]
            self._tasks = {}  # no longer needed: the strings are what records keep
        return done
