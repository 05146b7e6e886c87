"""Read a load snapshot written by ``loadstats.job`` (pyarrow only: no Spark, no JVM).

pyarrow is imported when a table is read (``read_meta`` needs none), so the coordinator imports
this module without the ``groupcoord[stats]`` extra; reading the tables without it raises an
``ImportError`` that names the extra.

Snapshot layout (see ``docs/loadstats.md``)::

    OUT -> .OUT.versions/<snapshot_id>/     (a symlink, replaced atomically per run)
        _meta.json                          snapshot_id, created_ms, caps, counts
        tasks/part-*.parquet                one row per (group_id, task_id)
        workers/part-*.parquet              one row per (group_id, worker_id)

The reader resolves the link once and reads everything from that one version, so it never
mixes two runs.
"""

from __future__ import annotations

import json
import os
from types import MappingProxyType
from typing import Any

from groupcoord.assignors.snapshot import (
    TASK_STATS_FIELDS,
    WORKER_STATS_FIELDS,
    LoadSnapshot,
    TaskLoadStats,
    WorkerLoadStats,
)

__all__ = ["read_meta", "read_snapshots", "snapshot_dir"]


def snapshot_dir(out_path: str) -> str:
    """The resolved directory of the current snapshot version (raises FileNotFoundError)."""
    real = os.path.realpath(out_path)
    if not os.path.isfile(os.path.join(real, "_meta.json")):
        raise FileNotFoundError(f"no load snapshot at {out_path!r}")
    return real


def read_meta(out_path: str) -> dict[str, Any]:
    """The snapshot's ``_meta.json`` (snapshot_id, created_ms, rows_read, rows_rejected, ...)."""
    with open(os.path.join(snapshot_dir(out_path), "_meta.json"), encoding="utf-8") as f:
        meta: dict[str, Any] = json.load(f)
    return meta


def _rows(directory: str, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    if not os.path.isdir(directory):
        return []
    try:
        import pyarrow.dataset as ds  # lazy: optional heavy dependency (groupcoord[stats])
    except ImportError as error:
        raise ImportError(f"reading a load snapshot needs pyarrow: pip install 'groupcoord[stats]' ({error})") from error
    dataset = ds.dataset(directory, format="parquet")  # ignores '.'/'_' files (_SUCCESS, .crc)
    names = set(dataset.schema.names)
    table = dataset.to_table(columns=["group_id", *(c for c in columns if c in names)])
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def read_snapshots(out_path: str, *, missing_ok: bool = False) -> dict[str, LoadSnapshot]:
    """``{group_id: LoadSnapshot}`` of the snapshot at ``out_path``.

    ``missing_ok=True`` returns ``{}`` when there is no snapshot yet; otherwise that raises
    ``FileNotFoundError``. A group appears when it has a task or a worker row.
    """
    try:
        real = snapshot_dir(out_path)
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise
    with open(os.path.join(real, "_meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    tasks: dict[str, dict[str, TaskLoadStats]] = {}
    workers: dict[str, dict[str, WorkerLoadStats]] = {}
    for row in _rows(os.path.join(real, "tasks"), TASK_STATS_FIELDS):
        group = row.pop("group_id")
        stats = TaskLoadStats(**{k: v for k, v in row.items() if v is not None})
        tasks.setdefault(group, {})[stats.task_id] = stats
    for row in _rows(os.path.join(real, "workers"), WORKER_STATS_FIELDS):
        group = row.pop("group_id")
        wstats = WorkerLoadStats(**{k: v for k, v in row.items() if v is not None})
        workers.setdefault(group, {})[wstats.worker_id] = wstats
    snapshot_id = str(meta.get("snapshot_id", ""))
    created_ms = int(meta.get("created_ms", 0))
    return {
        group: LoadSnapshot(
            group_id=group,
            snapshot_id=snapshot_id,
            created_ms=created_ms,
            tasks=MappingProxyType(dict(sorted(tasks.get(group, {}).items()))),
            workers=MappingProxyType(dict(sorted(workers.get(group, {}).items()))),
        )
        for group in sorted(set(tasks) | set(workers))
    }
