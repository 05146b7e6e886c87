"""The embedded default store: one SQLite file under the coordinator's ``--data-dir``.

Why SQLite: one file, atomic transactions, a write-ahead log that makes each commit durable with a
single append + fsync. Every ``save`` is one transaction (an UPSERT of the group's whole JSON record),
so a group is never half written, and it is durable before ``save`` returns, which is what lets the
coordinator acknowledge a change only after it is stored. A group's parts (per-member records, table
``parts``) are written with its record in that same transaction (``save_parts``: k rows for k members).
Schema 2 added that table; a version-1 file is migrated at open (the table is created, nothing moves).

Durability (``synchronous``): the default ``"FULL"`` fsyncs the WAL on every commit, so an
acknowledged change survives ``kill -9`` *and* power loss. ``"NORMAL"`` survives ``kill -9`` (the
commit is in the OS page cache) but may lose the last commits on power loss; it is offered for
hosts where fsync is slow. See ``benchmarks/store_bench.py`` for the measured cost.

The file is opened once and locked exclusively (``locking_mode=EXCLUSIVE``), so a second coordinator
started on the same data dir fails at startup instead of interleaving writes. A file that is not a
database, is corrupt, is locked, or carries a newer schema raises ``StoreError`` at open: the store
never silently resets.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Self

from groupcoord.coordinator.storage.store import GroupRecord, StoreError

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

#: The schema this code writes. Bump it (and add a migration step) when the tables change;
#: record contents are opaque and never need a migration.
SCHEMA_VERSION = 2

_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS groups (group_id TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID",
    ("CREATE TABLE IF NOT EXISTS parts (group_id TEXT NOT NULL, key TEXT NOT NULL, record TEXT NOT NULL, "
     "PRIMARY KEY (group_id, key)) WITHOUT ROWID"),
)

Synchronous = Literal["FULL", "NORMAL"]


class SqliteStore:
    """A ``GroupStore`` in one SQLite file (WAL journal, one transaction per save).

    Thread safety: one connection guarded by a lock, so one writer thread plus any number of
    reader threads may share an instance; calls are serialised.
    """

    def __init__(self, path: str | Path, *, synchronous: Synchronous = "FULL", check: bool = True) -> None:
        """Open (or create) the store; ``check`` runs ``PRAGMA quick_check`` to refuse a corrupt file."""
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self.path = Path(path)
        self._lock = threading.Lock()
        self._check_header(self.path)
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # created 0600 before SQLite opens it: its -wal and -shm files take the database's mode
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            # isolation_level=None: we issue BEGIN/COMMIT ourselves; timeout=0: a lock held by another
            # process is an immediate, clear error rather than a hang at startup.
            self._conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open group store {self.path}: {exc}") from exc
        try:
            self._setup(synchronous, check)
        except StoreError:
            self._conn.close()
            raise
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(f"cannot open group store {self.path}: {_describe(exc)}") from exc

    @staticmethod
    def _check_header(path: Path) -> None:
        """Refuse a non-empty file that is not SQLite before SQLite gets a chance to write to it."""
        if path.is_dir():
            raise StoreError(f"cannot open group store {path}: it is a directory")
        try:
            with path.open("rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot read group store {path}: {exc}") from exc
        if head and head != _SQLITE_MAGIC:
            raise StoreError(f"group store {path} is not an SQLite database (refusing to overwrite it)")

    def _setup(self, synchronous: Synchronous, check: bool) -> None:
        c = self._conn
        c.execute("PRAGMA locking_mode=EXCLUSIVE")
        mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"group store {self.path}: cannot switch to WAL journal (got {mode!r})")
        c.execute(f"PRAGMA synchronous={synchronous}")
        if check:
            problems = [row[0] for row in c.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise StoreError(f"group store {self.path} is corrupt: {'; '.join(problems[:3])}")
        c.execute("BEGIN IMMEDIATE")  # takes (and, in EXCLUSIVE mode, keeps) the write lock
        try:
            for ddl in _SCHEMA:
                c.execute(ddl)
            rows = c.execute("SELECT version FROM schema_version").fetchall()
            if not rows:
                c.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif len(rows) != 1:
                raise StoreError(f"group store {self.path} is corrupt: {len(rows)} schema_version rows")
            elif rows[0][0] > SCHEMA_VERSION:
                raise StoreError(
                    f"group store {self.path} has schema version {rows[0][0]}, newer than this groupcoord "
                    f"supports ({SCHEMA_VERSION}); upgrade groupcoord or use another --data-dir"
                )
            elif rows[0][0] < SCHEMA_VERSION:  # migrated: the tables it lacked were created above
                c.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def load_all(self) -> dict[str, GroupRecord]:
        with self._lock:
            try:
                rows = self._conn.execute("SELECT group_id, record FROM groups").fetchall()
                part_rows = self._conn.execute("SELECT group_id, key, record FROM parts").fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read group store {self.path}: {_describe(exc)}") from exc
        out: dict[str, GroupRecord] = {}
        for group_id, text in rows:
            out[group_id] = self._decode(group_id, text)
        for group_id, key, text in part_rows:
            if group_id in out:  # (a group's parts go with it: none without a group, but be whole)
                out[group_id].setdefault("parts", {})[key] = self._decode(group_id, text)
        return out

    def _decode(self, group_id: str, text: str) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise StoreError(f"group store {self.path}: record of group {group_id!r} is corrupt: {exc}") from exc

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        parts = record.get("parts") or {}
        head = _encode(group_id, {key: value for key, value in record.items() if key != "parts"})
        rows = [(group_id, key, _encode(group_id, value)) for key, value in parts.items()]
        self._transaction(group_id, "save", lambda c: (
            c.execute(_UPSERT_GROUP, (group_id, head)),
            c.execute("DELETE FROM parts WHERE group_id = ?", (group_id,)),
            c.executemany(_UPSERT_PART, rows)))

    def save_parts(self, group_id: str, record: Mapping[str, Any] | None, parts: Mapping[str, Any]) -> None:
        head = None if record is None else _encode(group_id, record)
        rows = [(group_id, key, _encode(group_id, value)) for key, value in parts.items() if value is not None]
        gone = [(group_id, key) for key, value in parts.items() if value is None]

        def write(c: sqlite3.Connection) -> None:
            if head is not None:
                c.execute(_UPSERT_GROUP, (group_id, head))
            c.executemany("DELETE FROM parts WHERE group_id = ? AND key = ?", gone)
            c.executemany(_UPSERT_PART, rows)

        self._transaction(group_id, "save", write)

    def delete(self, group_id: str) -> None:
        self._transaction(group_id, "delete", lambda c: (
            c.execute("DELETE FROM groups WHERE group_id = ?", (group_id,)),
            c.execute("DELETE FROM parts WHERE group_id = ?", (group_id,))))

    def _transaction(self, group_id: str, what: str, statements: Callable[[sqlite3.Connection], object]) -> None:
        """One transaction: atomic (the group and its parts together) and durable on return."""
        with self._lock:
            c = self._conn
            try:
                c.execute("BEGIN IMMEDIATE")
                statements(c)
                c.execute("COMMIT")
            except sqlite3.Error as exc:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                preposition = "to" if what == "save" else "from"
                raise StoreError(f"cannot {what} group {group_id!r} {preposition} {self.path}: {_describe(exc)}") from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_UPSERT_GROUP = ("INSERT INTO groups (group_id, record) VALUES (?, ?) "
                 "ON CONFLICT (group_id) DO UPDATE SET record = excluded.record")
_UPSERT_PART = ("INSERT INTO parts (group_id, key, record) VALUES (?, ?, ?) "
                "ON CONFLICT (group_id, key) DO UPDATE SET record = excluded.record")


def _encode(group_id: str, record: Mapping[str, Any]) -> str:
    try:
        return json.dumps(record, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"record of group {group_id!r} is not JSON-serialisable: {exc}") from exc


def _describe(exc: sqlite3.Error) -> str:
    """One line that says what to do about the common failures."""
    text = str(exc)
    if "locked" in text:
        return f"{text} (is another coordinator using this --data-dir?)"
    if isinstance(exc, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text):
        return f"{text} (the file is corrupt; restore it from a backup or move it away)"
    return text
