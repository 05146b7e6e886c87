"""The incremental job's output: a load snapshot written from a state version.

:func:`write_state_snapshot` reads a committed state version (``loadstats.state_fold``) and
:func:`write_snapshot_from_state` turns state-shaped tables into the full job's snapshot layout
(Parquet tables and ``_meta.json`` in a temporary directory, swapped into place atomically); the
archive's rebuild (``loadstats.rebuild``) writes its snapshot through the same function, so every
path publishes the same layout.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark at the top.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from groupcoord.loadstats.incremental import state_snapshot_tasks, state_snapshot_workers
from groupcoord.loadstats.session import _swap_into_place
from groupcoord.loadstats.state import StateView
from groupcoord.loadstats.state_fold import _add, _empty_counters, _state_frames
from groupcoord.loadstats.transforms import SplitThresholds, split_candidates

__all__ = ["write_snapshot_from_state", "write_state_snapshot"]


def write_state_snapshot(
    spark: SparkSession,
    view: StateView | None,
    out_path: str,
    *,
    samples_path: str,
    short_samples: int,
    long_samples: int,
    max_sample_age_s: float | None,
    thresholds: SplitThresholds | None = None,
) -> dict[str, Any]:
    """Write the snapshot (the full job's layout, swapped in atomically) from a state version; return its meta."""
    tasks0, workers0 = _state_frames(spark, view)
    counters = _add(_empty_counters(), view.meta if view is not None else {})
    return write_snapshot_from_state(
        tasks0, workers0, out_path,
        {"mode": "incremental", "samples_path": samples_path,
         "state_batch_id": view.batch_id if view is not None else -1, **counters},
        short_samples=short_samples, long_samples=long_samples, max_sample_age_s=max_sample_age_s,
        thresholds=thresholds,
    )


def write_snapshot_from_state(
    tasks0: DataFrame,
    workers0: DataFrame,
    out_path: str,
    meta_fields: Mapping[str, Any],
    *,
    short_samples: int,
    long_samples: int,
    max_sample_age_s: float | None,
    thresholds: SplitThresholds | None = None,
) -> dict[str, Any]:
    """Write a snapshot from state-shaped task and worker tables (``loadstats.incremental``'s
    columns), swapped in atomically; ``meta_fields`` (mode, counters, ...) go into its meta."""
    spark = tasks0.sparkSession
    max_age_ms = int(max_sample_age_s * 1000) if max_sample_age_s else None
    created_ms = time.time_ns() // 1_000_000
    snapshot_id = f"{created_ms:015d}-{uuid.uuid4().hex[:8]}"
    parent, name = os.path.split(out_path)
    os.makedirs(parent or ".", exist_ok=True)
    tmp_dir = os.path.join(parent, f".{name}.tmp-{snapshot_id}")
    try:
        tasks = split_candidates(state_snapshot_tasks(tasks0, workers0, short_samples, long_samples, max_age_ms), thresholds)
        tasks.repartition(1).sortWithinPartitions("group_id", "task_id").write.parquet(
            "file://" + os.path.join(tmp_dir, "tasks")
        )
        written = spark.read.parquet("file://" + os.path.join(tmp_dir, "tasks"))
        workers = state_snapshot_workers(workers0, written, max_age_ms)
        workers.repartition(1).sortWithinPartitions("group_id", "worker_id").write.parquet(
            "file://" + os.path.join(tmp_dir, "workers")
        )
        t, w = _counts(os.path.join(tmp_dir, "tasks"), os.path.join(tmp_dir, "workers"))
        meta: dict[str, Any] = {
            "format_version": 1,
            "snapshot_id": snapshot_id,
            "created_ms": created_ms,
            "short_samples_max": short_samples,
            "long_samples_max": long_samples,
            "max_sample_age_s": max_sample_age_s or None,
            "split_thresholds": {
                k: getattr(thresholds or SplitThresholds(), k)
                for k in ("max_topics", "max_sessions", "max_msg_rate", "max_bandwidth_mbytes", "min_topics")
            },
            **meta_fields,
            "tasks": t["n"],
            "workers": w["n"],
            "groups": w["g"],
            "split_candidates": t["s"],
        }
        with open(os.path.join(tmp_dir, "_meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        meta["snapshot_dir"] = _swap_into_place(tmp_dir, out_path, snapshot_id)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return meta


def _counts(tasks_dir: str, workers_dir: str) -> tuple[dict[str, int], dict[str, int]]:
    """Row, split-candidate, worker and group counts of the written tables, read with pyarrow:
    they are small, and two Spark jobs fewer per snapshot matter for a refresh of a minute's data."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    tasks = ds.dataset(tasks_dir, format="parquet").to_table(columns=["split_candidate"])
    workers = ds.dataset(workers_dir, format="parquet").to_table(columns=["group_id"])
    splits = pc.sum(tasks["split_candidate"].cast("int64")).as_py() if tasks.num_rows else 0
    return (
        {"n": tasks.num_rows, "s": int(splits or 0)},
        {"n": workers.num_rows, "g": len(pc.unique(workers["group_id"])) if workers.num_rows else 0},
    )
