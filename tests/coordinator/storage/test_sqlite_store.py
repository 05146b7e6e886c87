"""SqliteStore: round trip, atomic replacement, refusing bad files, and durability across SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from groupcoord.coordinator.storage.sqlite_store import SCHEMA_VERSION, SqliteStore
from groupcoord.coordinator.storage.store import GroupStore, StoreError
from tests.paths import ROOT as REPO


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "groups.db"


def test_is_a_group_store(db: Path) -> None:
    with SqliteStore(db) as store:
        assert isinstance(store, GroupStore)


def test_round_trip_replace_delete_and_reopen(db: Path) -> None:
    record = {"generation": 3, "members": [{"member_id": "m-1", "metadata": "AAE="}], "assignment": {"m-1": [["t", 0]]}}
    with SqliteStore(db) as store:
        assert store.load_all() == {}
        store.save("orders", record)
        store.save("grüße/β", {"generation": 1})
        store.save("orders", {**record, "generation": 4})
        store.delete("never-stored")
        store.save("gone", {"generation": 9})
        store.delete("gone")
        assert store.load_all() == {"orders": {**record, "generation": 4}, "grüße/β": {"generation": 1}}
    with SqliteStore(db) as store:
        assert store.load_all() == {"orders": {**record, "generation": 4}, "grüße/β": {"generation": 1}}


def test_failed_save_leaves_previous_record(db: Path) -> None:
    with SqliteStore(db) as store:
        store.save("g", {"generation": 1})
        with pytest.raises(StoreError, match="not JSON-serialisable"):
            store.save("g", {"generation": 2, "bad": object()})
        assert store.load_all() == {"g": {"generation": 1}}


def test_readers_never_see_a_half_written_record(db: Path) -> None:
    """One writer replaces a large record while readers load: every record read is self-consistent."""
    seen_bad: list[dict[str, object]] = []
    done = threading.Event()
    with SqliteStore(db, synchronous="NORMAL") as store:
        store.save("g", {"v": 0, "members": [0] * 500})

        def read() -> None:
            while not done.is_set():
                rec = store.load_all()["g"]
                if set(rec["members"]) != {rec["v"]}:
                    seen_bad.append(rec)

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        try:
            for v in range(1, 200):
                store.save("g", {"v": v, "members": [v] * 500})
        finally:
            done.set()
            for t in readers:
                t.join()
        assert store.load_all()["g"]["v"] == 199
    assert seen_bad == []


def test_not_a_database_is_refused_and_left_alone(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_text("these are my notes, not a database\n" * 200)
    before = db.read_bytes()
    with pytest.raises(StoreError, match="is not an SQLite database"):
        SqliteStore(db)
    assert db.read_bytes() == before


def test_corrupt_database_is_refused(db: Path) -> None:
    with SqliteStore(db, synchronous="NORMAL") as store:
        for i in range(300):
            store.save(f"group-{i}", {"generation": i, "members": [f"member-{j}" for j in range(20)]})
    raw = bytearray(db.read_bytes())
    assert len(raw) > 16 * 4096
    raw[4096 * 3:4096 * 12] = os.urandom(4096 * 9)  # trash pages past the header
    db.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="corrupt|malformed"):
        SqliteStore(db)


def test_directory_in_place_of_the_file_is_refused(db: Path) -> None:
    db.mkdir(parents=True)
    with pytest.raises(StoreError, match="is a directory"):
        SqliteStore(db)


def test_newer_schema_is_refused(db: Path) -> None:
    SqliteStore(db).close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than"):
        SqliteStore(db)


def test_second_opener_is_refused_while_the_first_holds_it(db: Path) -> None:
    with SqliteStore(db) as store:
        store.save("g", {"generation": 1})
        with pytest.raises(StoreError, match="another coordinator"):
            SqliteStore(db)
    with SqliteStore(db) as store:  # released on close
        assert store.load_all() == {"g": {"generation": 1}}


_CHILD = """
import sys
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
store = SqliteStore(sys.argv[1], synchronous=sys.argv[2])
for k in range(1_000_000):
    store.save(f"group-{k}", {"k": k, "members": [f"m-{k}-{j}" for j in range(10)]})
    store.save("latest", {"k": k})
    print(f"saved {k}", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_every_acknowledged_save_survives_sigkill(db: Path, synchronous: str) -> None:
    """A child saves and prints "saved k" after each save returns; SIGKILL it mid-stream: all k are there."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(db), synchronous], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    acknowledged: list[int] = []
    try:
        for line in child.stdout:
            acknowledged.append(int(line.split()[1]))
            if len(acknowledged) == 50:
                child.send_signal(signal.SIGKILL)
                break
        acknowledged += [int(line.split()[1]) for line in child.stdout]  # printed before the kill landed
    finally:
        child.kill()
        child.wait()
        stderr = child.stderr.read() if child.stderr else ""
    assert child.returncode == -signal.SIGKILL, stderr
    assert len(acknowledged) >= 50
    with SqliteStore(db) as store:
        records = store.load_all()
    for k in acknowledged:
        assert records[f"group-{k}"] == {"k": k, "members": [f"m-{k}-{j}" for j in range(10)]}
    assert records["latest"]["k"] >= acknowledged[-1]
