"""The full rebuild from the log: every sample file read again, two Spark passes, a new snapshot.

:func:`read_samples` reads the sample log's tree; :func:`rebuild_from_log` chains the pure
transforms of ``loadstats.transforms`` over two passes (the worker rows, then the task rows with
one shuffle), writes the snapshot's Parquet tables and ``_meta.json`` into a temporary directory
and swaps it into place atomically. ``loadstats.job`` decides when this runs (the archive of
``loadstats.rebuild`` spares it when it can) and is its entry point.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark at the top.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # pyspark's import-time notice about pandas 3
    from pyspark.sql import DataFrame, Observation, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

from groupcoord.loadstats.samples import SAMPLE_COLUMNS, sample_spark_schema
from groupcoord.loadstats.session import JobResult, _swap_into_place
from groupcoord.loadstats.transforms import (
    CORRUPT,
    REJECT_REASONS,
    SplitThresholds,
    coded_task_rows,
    fresh_since,
    latest_workers,
    reject_metrics,
    snapshot_tasks,
    split_candidates,
    tag_rejects,
    task_stats,
    worker_stats,
)

__all__ = ["read_samples", "rebuild_from_log"]

_STAGE = "stage-latest-workers"  # inside the snapshot's temp dir, removed before the swap (no leading
# "_" or ".": Spark would call the path hidden and warn)


def read_samples(spark: SparkSession, samples_path: str) -> DataFrame:
    """All Parquet (``*.parquet``) and JSON Lines (``*.jsonl``, ``*.json``) files under a tree.

    Files whose names start with ``.`` or ``_`` are ignored by Spark (the sample log's in-progress
    files). Columns follow the sample schema plus ``_corrupt_record`` (non-null for a JSON line
    that does not parse).
    """
    schema = sample_spark_schema()
    json_schema = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    reader = spark.read.option("recursiveFileLookup", "true")
    parquet = reader.schema(schema).option("pathGlobFilter", "*.parquet").parquet(samples_path)
    jsonl = (
        spark.read.option("recursiveFileLookup", "true")
        .schema(json_schema)
        .option("pathGlobFilter", "*.{jsonl,json}")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(samples_path)
    )
    parquet = parquet.select(*SAMPLE_COLUMNS, F.lit(None).cast("string").alias(CORRUPT))
    return parquet.unionByName(jsonl.select(*SAMPLE_COLUMNS, CORRUPT))




def _observed(observation: Any) -> dict[str, Any]:
    """An observation's metrics; empty when its pass saw no input (Spark then has no row to give)."""
    try:
        return dict(observation.get)
    except Exception:  # noqa: BLE001 - py4j's error for "no metrics row"; checked by the caller
        return {}


@dataclass(frozen=True)
class _LogCounts:
    """What one rebuild from the log counted: its rows (read, rejected per reason, repeated) and its tables."""

    rows_read: int
    rows_rejected: dict[str, int]
    rows_duplicate: int
    tasks: int
    split_candidates: int
    workers: int
    groups: int


def rebuild_from_log(
    session: SparkSession, samples_path: str, out_path: str, *, short_samples: int, long_samples: int,
    max_sample_age_s: float | None, thresholds: SplitThresholds | None, started: float,
) -> JobResult:
    """Read the whole log into a new snapshot: tables and meta written into a temporary directory
    beside ``out_path``, then swapped in, so a reader never sees half a snapshot (removed on any failure)."""
    created_ms = time.time_ns() // 1_000_000
    snapshot_id = f"{created_ms:015d}-{uuid.uuid4().hex[:8]}"
    parent, name = os.path.split(out_path)
    os.makedirs(parent or ".", exist_ok=True)
    tmp_dir = os.path.join(parent, f".{name}.tmp-{snapshot_id}")
    max_age_ms = int(max_sample_age_s * 1000) if max_sample_age_s else None
    try:
        counts = _write_log_tables(session, samples_path, tmp_dir, short_samples, long_samples, max_age_ms, thresholds)
        _write_meta(tmp_dir, _snapshot_meta(
            snapshot_id, created_ms, samples_path, short_samples, long_samples, max_sample_age_s, thresholds, counts,
        ))
        final = _swap_into_place(tmp_dir, out_path, snapshot_id)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return JobResult(
        samples_path=samples_path,
        out_path=out_path,
        snapshot_id=snapshot_id,
        created_ms=created_ms,
        rows_read=counts.rows_read,
        rows_rejected=counts.rows_rejected,
        rows_duplicate=counts.rows_duplicate,
        tasks=counts.tasks,
        workers=counts.workers,
        groups=counts.groups,
        split_candidates=counts.split_candidates,
        wall_time_s=time.monotonic() - started,
        snapshot_dir=final,
        extra={"source": "log"},
    )


def _write_log_tables(
    session: SparkSession, samples_path: str, tmp_dir: str, short_samples: int, long_samples: int,
    max_age_ms: int | None, thresholds: SplitThresholds | None,
) -> _LogCounts:
    """Write ``tmp_dir/tasks`` and ``tmp_dir/workers`` from the log in two passes; return their counts.

    Why two passes: the latest row per worker is small, so it is staged and re-read rather than
    recomputed inside the task pass, which then needs only one shuffle.
    """

    def parquet_path(part: str) -> str:
        return "file://" + os.path.join(tmp_dir, part)

    samples = read_samples(session, samples_path)
    worker_rows_seen, task_rows_seen, repeats = Observation(), Observation(), Observation()
    # pass 1: the worker rows -> latest row per worker (small; staged, then re-read)
    worker_rows = tag_rejects(samples, "worker").observe(worker_rows_seen, *reject_metrics())
    describe = session.sparkContext.setJobDescription  # names the passes in the Spark UI and its REST API
    describe("loadstats: worker pass")
    latest_workers(worker_rows).write.mode("overwrite").parquet(parquet_path(_STAGE))
    workers = session.read.parquet(parquet_path(_STAGE))
    since = fresh_since(workers, max_age_ms)
    # pass 2: the task rows -> averages (one shuffle)
    coded = coded_task_rows(tag_rejects(samples, "task"), workers).observe(task_rows_seen, *reject_metrics())
    good = coded.where(F.col("_reject").isNull()).drop("_reject")
    stats = task_stats(good, short_samples, long_samples, duplicates=repeats)
    tasks = split_candidates(snapshot_tasks(stats, workers, since), thresholds)
    describe("loadstats: task pass")
    tasks.repartition(1).sortWithinPartitions("group_id", "task_id").write.mode("overwrite").parquet(
        parquet_path("tasks")
    )
    written = session.read.parquet(parquet_path("tasks"))
    describe("loadstats: worker stats")
    (
        worker_stats(workers, since, written)
        .repartition(1)
        .sortWithinPartitions("group_id", "worker_id")
        .write.mode("overwrite")
        .parquet(parquet_path("workers"))
    )
    counts = _count_log_tables(session, written, parquet_path("workers"), worker_rows_seen, task_rows_seen, repeats)
    shutil.rmtree(os.path.join(tmp_dir, _STAGE))
    if counts.rows_read == 0 and (counts.tasks or counts.workers):
        raise RuntimeError("the job's row counts went missing (Spark reported no observed metrics)")
    return counts


def _count_log_tables(
    session: SparkSession, written_tasks: DataFrame, workers_path: str, worker_rows_seen: Observation,
    task_rows_seen: Observation, repeats: Observation,
) -> _LogCounts:
    """The rows the passes saw (their observed metrics) and the sizes of the written tables, for
    the snapshot's meta and the job's result (the caller checks the metrics did not go missing)."""
    seen = [_observed(worker_rows_seen), _observed(task_rows_seen)]
    rows_read = sum(int(s.get("rows", 0)) for s in seen)
    rejected = {r: sum(int(s.get(r, 0)) for s in seen) for r in REJECT_REASONS}
    duplicates = int(_observed(repeats).get("duplicates", 0))
    describe = session.sparkContext.setJobDescription
    describe("loadstats: summary")
    summary = written_tasks.agg(
        F.count(F.lit(1)).alias("tasks"),
        F.count(F.when(F.col("split_candidate"), 1)).alias("splits"),
    ).collect()[0]
    wsum = (
        session.read.parquet(workers_path)
        .agg(F.count(F.lit(1)).alias("workers"), F.countDistinct("group_id").alias("groups"))
        .collect()[0]
    )
    describe(None)  # type: ignore[arg-type]  # PySpark accepts None: clears it
    return _LogCounts(
        rows_read=rows_read,
        rows_rejected=rejected,
        rows_duplicate=duplicates,
        tasks=int(summary["tasks"]),
        split_candidates=int(summary["splits"]),
        workers=int(wsum["workers"]),
        groups=int(wsum["groups"]),
    )


def _snapshot_meta(
    snapshot_id: str, created_ms: int, samples_path: str, short_samples: int, long_samples: int,
    max_sample_age_s: float | None, thresholds: SplitThresholds | None, counts: _LogCounts,
) -> dict[str, Any]:
    """The snapshot's ``_meta.json``: what it was built from, with which settings, and what it holds
    (readers and the coordinator check a snapshot against it)."""
    return {
        "format_version": 1,
        "snapshot_id": snapshot_id,
        "created_ms": created_ms,
        "samples_path": samples_path,
        "short_samples_max": short_samples,
        "long_samples_max": long_samples,
        "max_sample_age_s": max_sample_age_s or None,
        "split_thresholds": {
            k: getattr(thresholds or SplitThresholds(), k)
            for k in ("max_topics", "max_sessions", "max_msg_rate", "max_bandwidth_mbytes", "min_topics")
        },
        "rows_read": counts.rows_read,
        "rows_rejected": counts.rows_rejected,
        "rows_duplicate": counts.rows_duplicate,
        "tasks": counts.tasks,
        "workers": counts.workers,
        "split_candidates": counts.split_candidates,
    }


def _write_meta(tmp_dir: str, meta: Mapping[str, Any]) -> None:
    """``_meta.json`` written and synced before the swap: a snapshot in place always has its meta."""
    with open(os.path.join(tmp_dir, "_meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
