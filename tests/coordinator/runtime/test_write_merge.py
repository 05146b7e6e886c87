"""Per-member writes queued behind a busy one are merged (O(their parts)), over a whole write or a
delete too; the record kept for a rollback follows them; a store that keeps whole records only is
given the group whole."""

from __future__ import annotations

from typing import Any

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import Forget, Persist
from groupcoord.coordinator.runtime.write_queue import applied, merged
from groupcoord.coordinator.storage.store import GroupRecord, MemoryStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G


def test_per_member_writes_merge_the_newest_part_and_group_record_winning() -> None:
    first = Persist("g", {"v": 1}, {"m:a": {"e": 1}, "m:b": {"e": 1}})
    second = merged(first, Persist("g", None, {"m:a": {"e": 2}, "m:c": None}))
    assert second == Persist("g", {"v": 1}, {"m:a": {"e": 2}, "m:b": {"e": 1}, "m:c": None})
    assert merged(second, Persist("g", {"v": 2}, {})).record == {"v": 2}


def test_over_a_whole_write_or_a_delete_the_merge_is_the_group_whole() -> None:
    whole = Persist("g", {"v": 1, "parts": {"m:a": {"e": 1}, "m:b": {"e": 1}}})
    assert merged(whole, Persist("g", None, {"m:a": None, "m:c": {"e": 1}})) == Persist(
        "g", {"v": 1, "parts": {"m:b": {"e": 1}, "m:c": {"e": 1}}})
    assert merged(Forget("g"), Persist("g", {"v": 5}, {"m:a": {"e": 1}, "m:x": None})) == Persist(
        "g", {"v": 5, "parts": {"m:a": {"e": 1}}})
    assert merged(whole, Persist("g", {"v": 2})) == Persist("g", {"v": 2})  # a newer whole write wins


def test_the_record_kept_for_a_rollback_follows_the_parts() -> None:
    stored: GroupRecord = {"v": 1, "parts": {"m:a": {"e": 1}}}
    after = applied(stored, None, {"m:a": None, "m:b": {"e": 2}})
    assert after == {"v": 1, "parts": {"m:b": {"e": 2}}}
    assert applied(after, {"v": 2}, {}, copy=True) == {"v": 2, "parts": {"m:b": {"e": 2}}}


class WholeOnly:
    """A store with no ``save_parts`` (a plug-in written before per-member records)."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.saves = 0

    def load_all(self) -> dict[str, GroupRecord]:
        return self.inner.load_all()

    def save(self, group_id: str, record: Any) -> None:
        self.saves += 1
        self.inner.save(group_id, record)

    def delete(self, group_id: str) -> None:
        self.inner.delete(group_id)

    def close(self) -> None:
        pass


def test_a_store_without_parts_is_given_the_group_whole_and_it_reloads() -> None:
    store = WholeOnly()
    h = Harness(CoordinatorConfig(), store=store)
    assert h.put_tasks(G, *(f"t{i}" for i in range(4))) == pb.NONE
    f = Fleet(h, ["a", "b"])
    f.join("a")
    f.join("b")
    f.settle()
    assert store.saves > 3
    record = store.inner.load_all()[G]
    members = h.model.consumer.groups[G].members
    assert {key for key in record["parts"] if key.startswith("m:")} == {f"m:{i}" for i in members}
    again = Harness(CoordinatorConfig(), store=store)
    assert again.runtime.load() == 1
    assert {i: m.reconciled.assigned for i, m in again.model.consumer.groups[G].members.items()} == {
        i: m.reconciled.assigned for i, m in members.items()}
