"""Where group metadata lives between restarts.

The coordinator keeps every group in memory and writes a group's whole record
through a ``GroupStore`` after each change it acknowledges (a completed join
phase, an accepted assignment, a leave, a catalog edit), before the response
leaves. A record is a JSON-serialisable dict owned by ``coordinator.model.records``;
stores treat it as an opaque document keyed by group id, so adding a field
never needs a store migration.

A group may also have **parts**: per-member records under keys of its own (a consumer group's
members and targets, ``coordinator.model.consumer_records``), so a change of k members writes k
parts and not the whole group. ``save_parts`` sets some parts (and the group's record, if given)
in one atomic write; ``load_all`` hands a group's parts back in its record's ``parts`` entry;
``save`` with a record whose ``parts`` entry lists them all replaces the group whole. ``save_parts``
is optional (``StoresParts``): a store without it is given the group whole on each write.

Implementations: ``MemoryStore`` (tests, benchmarks), the SQLite file store
(embedded default) and the ZooKeeper store (active/standby coordinators).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["GroupStore", "MemoryStore", "StoreError", "StoresParts", "FencedError", "WholeWriteNeeded"]

GroupRecord = dict[str, Any]


class StoreError(Exception):
    """The store cannot be read or written (corrupt file, lost connection...)."""


class WholeWriteNeeded(StoreError):
    """A change too large for one of the store's atomic writes: give the group whole (``save``) instead."""


class FencedError(StoreError):
    """This coordinator lost its leadership: it must not write (or act) any more."""


@runtime_checkable
class GroupStore(Protocol):
    def load_all(self) -> dict[str, GroupRecord]:
        """Every stored group record, keyed by group id."""
        ...

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        """Replace the group's record atomically and durably (raises StoreError/FencedError); its
        parts become those of ``record["parts"]`` (none when it has no such entry)."""
        ...

    def delete(self, group_id: str) -> None:
        """Forget the group (no error if it was never stored)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class StoresParts(Protocol):
    """A store that writes a group's parts on their own (the others are given the group whole)."""

    def save_parts(self, group_id: str, record: Mapping[str, Any] | None, parts: Mapping[str, Any]) -> None:
        """Set the group's parts in ``parts`` (a None value deletes one) and its record, unless None,
        in one atomic, durable write (raises StoreError/FencedError)."""
        ...


class MemoryStore:
    """A store that keeps records in this process only (nothing survives a restart)."""

    def __init__(self) -> None:
        self._records: dict[str, GroupRecord] = {}
        self._lock = threading.Lock()

    def load_all(self) -> dict[str, GroupRecord]:
        with self._lock:
            records = copy.deepcopy(self._records)
        for record in records.values():
            if not record["parts"]:
                del record["parts"]
        return records

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        # Records are built afresh for each save and never mutated after, so keeping the
        # reference is safe; load_all hands out copies. Parts are kept in a dict of our own.
        with self._lock:
            self._records[group_id] = {**record, "parts": dict(record.get("parts") or {})}

    def save_parts(self, group_id: str, record: Mapping[str, Any] | None, parts: Mapping[str, Any]) -> None:
        with self._lock:
            stored = self._records.get(group_id)
            if stored is None and record is None:
                raise StoreError(f"group {group_id!r}: parts saved before the group's record")
            kept: dict[str, Any] = stored["parts"] if stored is not None else {}
            for key, value in parts.items():
                if value is None:
                    kept.pop(key, None)
                else:
                    kept[key] = value
            if record is not None:
                self._records[group_id] = {**record, "parts": kept}

    def delete(self, group_id: str) -> None:
        with self._lock:
            self._records.pop(group_id, None)

    def close(self) -> None:
        pass
