"""Each group's store writes, in order, and the replies that wait for them.

A group has at most one write in flight and one queued (a newer whole record replaces the queued
one; a newer per-member write, ``Persist.parts``, is merged into it: its group record if it has
one, and its parts over the queued ones). A reply waits for every write of its group queued
before it, so a member never hears of a change the store could still lose, while a slow write (a
ZooKeeper round trip) delays only its own group. Each group's record as last stored, its parts
with it, is kept for a rollback; a per-member write updates it in O(parts written).

What a finished write means for the runtime (answer the replies, roll the group back, stand down
when fenced) is the runtime's: this module calls back with the outcome (``WriteOutcomes``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from groupcoord.coordinator.model.effects import Forget, Persist, Reply
from groupcoord.coordinator.model.records import finish_record
from groupcoord.coordinator.runtime.heap import bulk_job
from groupcoord.coordinator.runtime.metrics import CoordinatorMetrics
from groupcoord.coordinator.runtime.writers import Writer
from groupcoord.coordinator.storage.store import GroupRecord, GroupStore, StoresParts, WholeWriteNeeded

__all__ = ["WriteOutcomes", "WriteQueue", "Writes", "applied", "merged"]

Write = Persist | Forget


@dataclass
class Writes:
    """One group's write queue."""

    busy: Write | None = None
    queued: Write | None = None
    after_busy: list[Reply] = field(default_factory=list)
    after_queued: list[Reply] = field(default_factory=list)


class WriteOutcomes(Protocol):
    """What the runtime does once a write has landed or failed."""

    def deliver(self, reply: Reply) -> None:
        """Answer a reply whose writes have landed."""

    def write_failed(self, group_id: str, failure: BaseException, waiting: list[Reply],
                     stored: GroupRecord | None) -> None:
        """A write failed: ``waiting`` replies are unanswered, ``stored`` is the group as last stored."""

    def landed(self, group_id: str) -> None:
        """The group's record as it now is has landed, with no newer write queued behind it."""


class WriteQueue:
    """Every group's writes of one runtime, and each group's record as last written or loaded."""

    def __init__(self, store: GroupStore, writer: Writer, metrics: CoordinatorMetrics) -> None:
        self.store = store
        self.writer = writer
        self._metrics = metrics
        self._writes: dict[str, Writes] = {}
        self._stored: dict[str, GroupRecord] = {}
        #: store jobs started and not yet finished, unloaded groups' included (a hand-over waits for 0)
        self.in_flight = 0
        self.on_idle: Callable[[], object] | None = None  # called when ``in_flight`` drops to 0

    def busy(self, group_id: str) -> bool:
        """Whether a write of ``group_id`` is in flight (a reply to the group must wait for it)."""
        return group_id in self._writes

    def stored(self, group_id: str) -> GroupRecord | None:
        return self._stored.get(group_id)

    def records(self) -> dict[str, Any]:
        """Each group's last durable record (for tests and tools)."""
        return dict(self._stored)

    def hold(self, reply: Reply) -> bool:
        """Hold ``reply`` behind its group's writes; False: none, answer it now."""
        writes = self._writes.get(reply.group_id) if reply.group_id else None
        if writes is None:
            return False
        if writes.queued is not None:
            writes.after_queued.append(reply)
        else:
            writes.after_busy.append(reply)
        return True

    def queue(self, write: Write) -> Writes | None:
        """Queue ``write``; returns its group's queue if the write must be started (``start``)."""
        writes = self._writes.get(write.group_id)
        if writes is None:
            writes = self._writes[write.group_id] = Writes(busy=write)
            return writes
        writes.queued = merged(writes.queued, write)
        return None

    def start(self, writes: Writes, write: Write, outcomes: WriteOutcomes) -> None:
        writes.busy = write
        store = self.store
        finished: dict[str, dict[str, Any]] = {}
        if isinstance(write, Persist) and write.parts is not None:
            base = self._stored.get(write.group_id)

            def job() -> None:
                head = None if write.record is None else finish_record(write.record)
                assert write.parts is not None
                try:
                    if not isinstance(store, StoresParts):
                        raise WholeWriteNeeded("the store keeps whole records only")
                    store.save_parts(write.group_id, head, write.parts)
                except WholeWriteNeeded:  # the group as it will stand, whole
                    store.save(write.group_id, applied(base, head, write.parts, copy=True))
                if head is not None:
                    finished[write.group_id] = head
        elif isinstance(write, Persist):
            assert write.record is not None

            def job() -> None:
                assert write.record is not None
                record = finish_record(write.record)  # the serialising, here on the writer's thread
                store.save(write.group_id, record)
                finished[write.group_id] = record
        else:
            def job() -> None:
                store.delete(write.group_id)
        timed = self._metrics.timed_write("save" if isinstance(write, Persist) else "delete", bulk_job(job))
        self.in_flight += 1

        def done(failure: BaseException | None) -> None:
            self.in_flight -= 1
            try:
                self._written(writes, write, failure, finished.get(write.group_id), outcomes)
            finally:
                if self.in_flight == 0 and self.on_idle is not None:
                    self.on_idle()

        self.writer.submit(timed, done)

    def _written(self, writes: Writes, write: Write, failure: BaseException | None,
                 record: dict[str, Any] | None, outcomes: WriteOutcomes) -> None:
        group_id = write.group_id
        if self._writes.get(group_id) is not writes:
            return  # unloaded meanwhile: its replies were already answered
        if failure is not None:
            del self._writes[group_id]
            outcomes.write_failed(group_id, failure, writes.after_busy + writes.after_queued,
                                  self._stored.get(group_id))
            return
        if isinstance(write, Persist) and write.parts is not None:
            self._stored[group_id] = applied(self._stored.get(group_id), record, write.parts)
        elif isinstance(write, Persist):
            assert write.record is not None
            self._stored[group_id] = record if record is not None else finish_record(write.record)
        else:
            self._stored.pop(group_id, None)
        done, writes.after_busy = writes.after_busy, writes.after_queued
        writes.after_queued = []
        queued, writes.queued, writes.busy = writes.queued, None, writes.queued
        if queued is None:
            del self._writes[group_id]
        for reply in done:
            outcomes.deliver(reply)
        if queued is not None:
            self.start(writes, queued, outcomes)
        elif isinstance(write, Persist):
            outcomes.landed(group_id)

    def begin(self, records: dict[str, GroupRecord]) -> None:
        """A new term's groups, as loaded."""
        self._stored = dict(records)

    def drop(self) -> list[Reply]:
        """Forget every queue and record (unloading); returns the replies that were waiting."""
        pending = [reply for writes in self._writes.values() for reply in writes.after_busy + writes.after_queued]
        self._writes.clear()
        self._stored.clear()
        return pending


def merged(queued: Write | None, newer: Write) -> Write:
    """What one write must do for ``queued`` then ``newer``. A newer whole write or delete wins; a newer
    per-member write is merged into the queued one in place (O(its parts), however many were merged)."""
    if not isinstance(newer, Persist) or newer.parts is None or queued is None:
        return newer
    if isinstance(queued, Persist) and queued.parts is not None:
        queued.parts.update(newer.parts)
        return Persist(newer.group_id, newer.record if newer.record is not None else queued.record, queued.parts)
    # after a whole write or a delete, the group whole: the queued record (or the newer one) and its parts
    record = newer.record if newer.record is not None else (queued.record if isinstance(queued, Persist) else None)
    if record is None:
        raise ValueError(f"group {newer.group_id!r}: a per-member write after a delete carries no group record")
    before = queued.record if isinstance(queued, Persist) else None  # a delete left no parts
    parts = dict((before or {}).get("parts") or {})
    parts.update(newer.parts)
    return Persist(newer.group_id, {**record, "parts": {k: v for k, v in parts.items() if v is not None}})


def applied(stored: GroupRecord | None, head: dict[str, Any] | None, parts: dict[str, Any],
            copy: bool = False) -> GroupRecord:
    """``stored`` (a group's record, its parts in its ``parts`` entry) after a per-member write: a new
    dict for the record; its parts dict updated in place unless ``copy``."""
    if head is None and stored is None:
        raise ValueError("a per-member write to a group never stored carries no group record")
    kept = (stored or {}).get("parts") or {}
    if copy:
        kept = dict(kept)
    for key, value in parts.items():
        if value is None:
            kept.pop(key, None)
        else:
            kept[key] = value
    record = dict(head if head is not None else stored or {})
    record["parts"] = kept
    return record
