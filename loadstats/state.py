"""The incremental job's state directory: versioned Parquet tables and one atomic pointer.

Layout (``STATE`` defaults to ``OUT.state`` beside the snapshot)::

    STATE/
      CURRENT                    JSON, replaced atomically (os.replace): the batch id the state
                                 has applied, its version directory, the caps and the counters
      versions/<batch_id>/       tasks/ and workers/ Parquet (loadstats.incremental's columns)
      checkpoint/                Spark Structured Streaming's checkpoint (which files, which batch)
      segments/<batch_id>-<id>/  the compacted archive: the folded rows as Parquet clustered by
                                 task (loadstats.compaction), the ones CURRENT lists count

Why a pointer: a micro-batch writes a whole new version and then swaps ``CURRENT``; a crash
before the swap leaves the old state, a crash after it leaves the new one, never a mix. Spark's
checkpoint records a batch's files *before* the batch runs and commits it *after*, so after a
crash Spark runs the last uncommitted batch again with the same files and the same batch id;
:meth:`StateStore.applied` then tells whether this state already has it (crash after the swap,
before Spark's commit), and the batch is skipped instead of counted twice.

Parquet rather than a Delta Lake table: the state is small (a row per task and per worker) and
rewritten whole per batch, so Delta's row-level MERGE buys nothing, and the one atomic step
needed is the pointer swap above. ``delta-spark`` from PyPI also needs its jars from Maven at
session start, which an offline or locked-down host cannot fetch.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from groupcoord.figures import RESOURCE_COLUMNS, TASK_COUNTS

__all__ = ["StateStore", "StateView", "task_state_ddl", "worker_state_ddl"]

_CURRENT = "CURRENT"
_VERSIONS = "versions"
_CHECKPOINT = "checkpoint"
_SEGMENTS = "segments"


@dataclass(frozen=True)
class StateView:
    """What ``CURRENT`` says: the last applied batch, its version directory and the counters."""

    batch_id: int
    version_dir: str
    meta: Mapping[str, Any]


class StateStore:
    """Versioned state under ``root`` (a local or mounted path; see the module docstring)."""

    def __init__(self, root: str, keep: int = 2) -> None:
        self.root = os.path.abspath(root)
        self.keep = keep

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.root, _CHECKPOINT)

    @property
    def segments(self) -> str:
        """The compacted archive's segments (``loadstats.compaction``), listed in ``CURRENT``."""
        return os.path.join(self.root, _SEGMENTS)

    def current(self) -> StateView | None:
        """The state's pointer, or None before the first batch."""
        try:
            with open(os.path.join(self.root, _CURRENT), encoding="utf-8") as f:
                meta = json.load(f)
        except FileNotFoundError:
            return None
        return StateView(int(meta["batch_id"]), os.path.join(self.root, _VERSIONS, meta["version"]), meta)

    def applied(self, batch_id: int) -> bool:
        """True when the state already includes micro-batch ``batch_id`` (a re-run after a crash)."""
        cur = self.current()
        return cur is not None and cur.batch_id >= batch_id

    def new_version_dir(self, batch_id: int) -> str:
        """A fresh hidden directory to write the next version into (moved by :meth:`commit`)."""
        path = os.path.join(self.root, _VERSIONS, f".tmp-{batch_id:012d}-{uuid.uuid4().hex[:8]}")
        os.makedirs(path)
        return path

    def commit(self, batch_id: int, tmp_dir: str, meta: Mapping[str, Any]) -> StateView:
        """Move ``tmp_dir`` into place as version ``batch_id`` and swap ``CURRENT`` to it."""
        name = f"{batch_id:012d}-{uuid.uuid4().hex[:8]}"
        final = os.path.join(self.root, _VERSIONS, name)
        os.replace(tmp_dir, final)
        full = {**meta, "batch_id": batch_id, "version": name}
        tmp = os.path.join(self.root, f".{_CURRENT}.{uuid.uuid4().hex[:8]}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(full, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(self.root, _CURRENT))
        self._prune(name)
        return StateView(batch_id, final, full)

    def _prune(self, current: str) -> None:
        versions = os.path.join(self.root, _VERSIONS)
        names = sorted(n for n in os.listdir(versions) if n != current)
        done = [n for n in names if not n.startswith(".")]
        for n in done[: max(0, len(done) - (self.keep - 1))]:
            shutil.rmtree(os.path.join(versions, n), ignore_errors=True)
        for n in names:  # leftovers of batches that crashed before their commit
            if n.startswith(".tmp-"):
                shutil.rmtree(os.path.join(versions, n), ignore_errors=True)

    def reset(self) -> None:
        """Forget everything: state, pointer and Spark checkpoint (the next run reads the whole log)."""
        shutil.rmtree(self.root, ignore_errors=True)


def task_state_ddl() -> str:
    """The task state's schema as DDL (for an empty state)."""
    from groupcoord.figures import LONG, SHORT, TASK_RATES, averaged

    cols = ["group_id string", "task_id string", "worker_id string", "ts_ms bigint", "n bigint"]
    cols += [f"last_{c} double" for c in TASK_RATES]
    cols += [f"{c} int" for c in TASK_COUNTS]
    cols += [f"{c} double" for c in (*averaged(SHORT), *averaged(LONG))]
    return ", ".join(cols)


def worker_state_ddl() -> str:
    """The worker state's schema as DDL (for an empty state)."""
    return ", ".join(["group_id string", "worker_id string", "ts_ms bigint", *(f"{c} double" for c in RESOURCE_COLUMNS)])
