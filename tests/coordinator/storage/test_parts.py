"""A group's parts (per-member records) in every local store: written with the group's record in one
atomic write, read back with it, replaced or deleted with it; and a SQLite file of schema 1 (whole
records only) migrated at open."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupcoord.coordinator.storage.sqlite_store import SCHEMA_VERSION, SqliteStore
from groupcoord.coordinator.storage.store import MemoryStore, StoreError, StoresParts


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: Any = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "groups.db")
    yield made
    made.close()


def test_parts_are_written_with_the_group_and_read_back_in_its_record(store: Any) -> None:
    assert isinstance(store, StoresParts)
    store.save_parts("g", {"generation": 1}, {"m:a": {"epoch": 1}, "m:b": {"epoch": 1}, "t:a": [["t1", 0]]})
    store.save_parts("g", None, {"m:a": {"epoch": 2}, "m:b": None, "m:never": None})  # the group's own unchanged
    store.save("classic", {"generation": 4})
    assert store.load_all() == {
        "g": {"generation": 1, "parts": {"m:a": {"epoch": 2}, "t:a": [["t1", 0]]}},
        "classic": {"generation": 4},
    }
    store.save("g", {"generation": 2, "parts": {"m:c": {"epoch": 3}}})  # whole: these parts and no other
    assert store.load_all()["g"] == {"generation": 2, "parts": {"m:c": {"epoch": 3}}}
    store.save("g", {"generation": 3})  # whole, no parts: none left
    assert store.load_all()["g"] == {"generation": 3}
    store.save_parts("g", None, {"m:d": {"epoch": 1}})
    store.delete("g")
    assert "g" not in store.load_all()


def test_a_failed_write_changes_neither_the_group_nor_its_parts(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "groups.db") as store:
        store.save_parts("g", {"generation": 1}, {"m:a": {"epoch": 1}, "m:b": {"epoch": 1}})
        with pytest.raises(StoreError, match="not JSON-serialisable"):
            store.save_parts("g", {"generation": 2}, {"m:a": {"epoch": 2}, "m:b": {"bad": object()}})
        assert store.load_all() == {"g": {"generation": 1, "parts": {"m:a": {"epoch": 1}, "m:b": {"epoch": 1}}}}


def test_parts_outlive_a_reopen(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "groups.db") as store:
        store.save_parts("g", {"generation": 1}, {"m:a": {"epoch": 1}})
    with SqliteStore(tmp_path / "groups.db") as store:
        assert store.load_all() == {"g": {"generation": 1, "parts": {"m:a": {"epoch": 1}}}}


def test_a_schema_1_file_is_migrated_at_open_and_its_records_kept(tmp_path: Path) -> None:
    path = tmp_path / "groups.db"
    with sqlite3.connect(path) as old:  # as groupcoord wrote it before parts
        old.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        old.execute("INSERT INTO schema_version (version) VALUES (1)")
        old.execute("CREATE TABLE groups (group_id TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID")
        old.execute("INSERT INTO groups VALUES ('g', '{\"generation\": 7}')")
    old.close()
    with SqliteStore(path) as store:
        assert store.load_all() == {"g": {"generation": 7}}
        store.save_parts("g", None, {"m:a": {"epoch": 1}})
        assert store.load_all() == {"g": {"generation": 7, "parts": {"m:a": {"epoch": 1}}}}
    check = sqlite3.connect(path)
    assert check.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)] == [(2,)]
    check.close()
