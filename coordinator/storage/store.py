"""Where group metadata lives between restarts.

The coordinator keeps every group in memory and writes a group's whole record
through a ``GroupStore`` after each change it acknowledges (a completed join
phase, an accepted assignment, a leave, a catalog edit), before the response
leaves. A record is a JSON-serialisable dict owned by ``coordinator.model.records``;
stores treat it as an opaque document keyed by group id, so adding a field
never needs a store migration.

Implementations: ``MemoryStore`` (tests, benchmarks), the SQLite file store
(embedded default) and the ZooKeeper store (active/standby coordinators).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["GroupStore", "MemoryStore", "StoreError", "FencedError"]

GroupRecord = dict[str, Any]


class StoreError(Exception):
    """The store cannot be read or written (corrupt file, lost connection...)."""


class FencedError(StoreError):
    """This coordinator lost its leadership: it must not write (or act) any more."""


@runtime_checkable
class GroupStore(Protocol):
    def load_all(self) -> dict[str, GroupRecord]:
        """Every stored group record, keyed by group id."""
        ...

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        """Replace the group's record atomically and durably (raises StoreError/FencedError)."""
        ...

    def delete(self, group_id: str) -> None:
        """Forget the group (no error if it was never stored)."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    """A store that keeps records in this process only (nothing survives a restart)."""

    def __init__(self) -> None:
        self._records: dict[str, GroupRecord] = {}
        self._lock = threading.Lock()

    def load_all(self) -> dict[str, GroupRecord]:
        with self._lock:
            return copy.deepcopy(self._records)

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        # Records are built afresh for each save and never mutated after, so keeping the
        # reference is safe; load_all hands out copies.
        with self._lock:
            self._records[group_id] = dict(record)

    def delete(self, group_id: str) -> None:
        with self._lock:
            self._records.pop(group_id, None)

    def close(self) -> None:
        pass
