"""The full rebuild from the compacted archive: no shuffle of the folded samples (PySpark).

``loadstats.job.run`` calls :func:`rebuild_from_archive` first. When the state beside the
snapshot has an archive of the same sample log (``loadstats.compaction``), the rebuild:

1. lists the sample files as the JSON rebuild would read them; those no segment holds (the files
   that arrived after the last incremental run) are read as JSON/Parquet and compacted into a
   temporary segment, the only rows that cross a shuffle;
2. takes the latest worker rows from every segment's small worker table (on the driver);
3. runs one Spark task per bucket (``mapInArrow`` over ``range(buckets)``): each reads its
   bucket's files from every segment with pyarrow (vectorized Parquet) and folds them with
   ``loadstats.sorted_runs.fold_bucket``, the full rebuild's rules over rows sorted by task;
4. writes the snapshot from those per-task rows as the incremental run does.

The result equals the JSON rebuild's (late samples in their place, repeats once, the same
rejects); it returns None, and the JSON rebuild runs, when there is no usable archive: none yet,
another sample log, or sample files it holds have gone from the log (retention dropped them:
the JSON rebuild would no longer count them, so neither may this one).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from groupcoord.loadstats.compaction import (
    BUCKETS,
    Segment,
    bucket_files,
    latest_workers_table,
    normalize_file,
    read_segment,
    write_segment,
)
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, sample_spark_schema
from groupcoord.loadstats.session import JobResult
from groupcoord.loadstats.sorted_runs import TASK_ROW_COLUMNS, fold_bucket, state_task_schema, worker_key
from groupcoord.loadstats.state import StateStore
from groupcoord.loadstats.stream import default_state_path, write_snapshot_from_state
from groupcoord.loadstats.transforms import CORRUPT, REJECT_REASONS, SplitThresholds, tag_rejects

__all__ = ["rebuild_from_archive", "sample_files"]

log = logging.getLogger(__name__)

_COUNTS = ("_duplicates", "_unknown_workers")


def _readers(spark: SparkSession) -> tuple[Any, Any]:
    schema = sample_spark_schema()
    json_schema = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    parquet = spark.read.schema(schema).option("pathGlobFilter", "*.parquet")
    jsonl = (
        spark.read.schema(json_schema)
        .option("pathGlobFilter", "*.{jsonl,json}")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
    )
    return parquet, jsonl


def sample_files(spark: SparkSession, samples_path: str) -> tuple[list[str], list[str]]:
    """The Parquet and the JSON Lines files ``loadstats.job.read_samples`` reads, as Spark lists them."""
    parquet, jsonl = _readers(spark)
    return (
        list(parquet.option("recursiveFileLookup", "true").parquet(samples_path).inputFiles()),
        list(jsonl.option("recursiveFileLookup", "true").json(samples_path).inputFiles()),
    )


def _read_files(spark: SparkSession, parquet_files: list[str], json_files: list[str]) -> DataFrame:
    """Exactly these sample files, in ``read_samples``' columns."""
    parquet_reader, json_reader = _readers(spark)
    frames = []
    if parquet_files:
        frames.append(
            parquet_reader.parquet(*parquet_files).select(*SAMPLE_COLUMNS, F.lit(None).cast("string").alias(CORRUPT))
        )
    if json_files:
        frames.append(json_reader.json(json_files).select(*SAMPLE_COLUMNS, CORRUPT))
    out = frames[0]
    for more in frames[1:]:
        out = out.unionByName(more)
    return out


def _fold_buckets(
    spark: SparkSession, segment_dirs: list[str], buckets: int, known: pa.Array, short: int, long: int
) -> DataFrame:
    """One Spark task per bucket: the bucket's rows from every segment, folded per task.

    Besides the task rows, each bucket yields one row with null ids carrying its repeat and
    unknown-worker counts (``_COUNTS``).
    """
    schema = state_task_schema()
    out_schema = pa.schema([*schema, *(pa.field(c, pa.int64()) for c in _COUNTS)])

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq  # on the executor

        for batch in batches:
            for bucket in batch.column(0).to_pylist():
                paths = [p for d in segment_dirs for p in bucket_files(d, int(bucket))]
                if not paths:
                    continue
                rows = pa.concat_tables([pq.read_table(p, columns=list(TASK_ROW_COLUMNS)) for p in paths])
                result = fold_bucket(rows, known, short, long, presorted=len(paths) == 1)
                nulls = [pa.nulls(result.tasks.num_rows, pa.int64())] * len(_COUNTS)
                yield from pa.Table.from_arrays([*result.tasks.columns, *nulls], schema=out_schema).to_batches()
                counts = [pa.array([result.duplicates]), pa.array([result.unknown_workers])]
                empty = [pa.nulls(1, f.type) for f in schema]
                yield pa.RecordBatch.from_arrays([*empty, *counts], schema=out_schema)

    ids = spark.range(0, buckets, 1, numPartitions=buckets)
    ddl = ", ".join(f"{f.name} {_ddl_type(f.type)}" for f in out_schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pyspark's notice about pandas 3 (no pandas is used)
        return ids.mapInArrow(fold, ddl)


def _ddl_type(t: pa.DataType) -> str:
    return {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int", pa.float64(): "double"}[t]


class _UsableArchive(NamedTuple):
    """The state's archive entry, its segments and the files they cover, and the log's files now."""

    archive: Mapping[str, Any]
    segments: list[Segment]
    covered: set[str]
    present: dict[str, str]  # normalized name -> the file as Spark lists it
    parquet_files: list[str]


def _usable_archive(spark: SparkSession, store: StateStore, samples_path: str) -> _UsableArchive | None:
    """The archive and the log's files, or None (the reason logged) when the archive cannot stand in
    for the log: none yet, another log's, or a file it covers gone from the log (the rebuild must
    not count samples the log no longer has)."""
    view = store.current()
    archive: Mapping[str, Any] = (view.meta.get("compacted") or {}) if view is not None else {}
    if not archive.get("segments"):
        return None
    if archive.get("samples_path") != samples_path:
        log.info("full rebuild: the archive in %s is of %s, not %s: reading the whole log",
                 store.root, archive.get("samples_path"), samples_path)
        return None
    segments = [read_segment(store.segments, n) for n in archive["segments"]]
    covered = {f for s in segments for f in s.files}
    parquet_files, json_files = sample_files(spark, samples_path)
    present = {normalize_file(f): f for f in (*parquet_files, *json_files)}
    gone = covered - present.keys()
    if gone:
        log.info("full rebuild: %d sample file(s) of the archive are gone from the log (e.g. %s): reading the "
                 "whole log", len(gone), min(gone))
        return None
    return _UsableArchive(archive, segments, covered, present, parquet_files)


def rebuild_from_archive(
    spark: SparkSession,
    samples_path: str,
    out_path: str,
    *,
    state_path: str | None = None,
    short_samples: int,
    long_samples: int,
    max_sample_age_s: float | None,
    thresholds: SplitThresholds | None = None,
) -> JobResult | None:
    """The full rebuild from the archive in ``state_path`` (default ``OUT.state``), or None when
    there is no usable one (see the module docstring; the reason is logged)."""
    started = time.monotonic()
    store = StateStore(state_path or default_state_path(out_path))
    usable = _usable_archive(spark, store, samples_path)
    if usable is None:
        return None
    archive, segments, covered, present, parquet_files = usable
    buckets = int(archive.get("buckets", BUCKETS))
    segment_dirs = [os.path.join(store.segments, s.name) for s in segments]
    rows_read = sum(s.rows_read for s in segments)
    rejected = {r: sum(int(s.rejected.get(r, 0)) for s in segments) for r in REJECT_REASONS}
    parent, name = os.path.split(out_path)
    os.makedirs(parent or ".", exist_ok=True)
    stage = os.path.join(parent, f".{name}.rebuild-{uuid.uuid4().hex[:8]}")
    describe = spark.sparkContext.setJobDescription
    try:
        new = {n: f for n, f in present.items() if n not in covered}
        if new:
            describe("loadstats: compact new files")
            os.makedirs(stage)
            newest = _read_files(spark, [f for f in new.values() if f in parquet_files],
                                 [f for f in new.values() if f not in parquet_files])
            segment = write_segment(tag_rejects(newest), stage, -1, list(new), buckets=buckets)
            segment_dirs.append(os.path.join(stage, segment.name))
            rows_read += segment.rows_read
            rejected = {r: rejected[r] + int(segment.rejected.get(r, 0)) for r in REJECT_REASONS}
        workers = latest_workers_table(segment_dirs)
        known = worker_key(workers["group_id"], workers["worker_id"]).combine_chunks()
        describe("loadstats: per-task scan of the archive")
        folded = _fold_buckets(spark, segment_dirs, buckets, known, short_samples, long_samples).persist()
        try:
            counts = folded.where(F.col("group_id").isNull()).agg(*(F.sum(c).alias(c) for c in _COUNTS)).collect()[0]
            tasks0 = folded.where(F.col("group_id").isNotNull()).drop(*_COUNTS)
            workers0 = spark.createDataFrame(workers)
            rejected["unknown_worker"] = int(counts["_unknown_workers"] or 0)
            duplicates = int(counts["_duplicates"] or 0)
            describe("loadstats: snapshot")
            meta = write_snapshot_from_state(
                tasks0, workers0, out_path,
                {"mode": "full", "source": "archive", "samples_path": samples_path, "rows_read": rows_read,
                 "rows_rejected": rejected, "rows_duplicate": duplicates,
                 "archive_files": len(covered), "new_files": len(new)},
                short_samples=short_samples, long_samples=long_samples, max_sample_age_s=max_sample_age_s,
                thresholds=thresholds,
            )
        finally:
            folded.unpersist()
            describe(None)  # type: ignore[arg-type]  # PySpark accepts None: clears it
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return JobResult(
        samples_path=samples_path,
        out_path=out_path,
        snapshot_id=meta["snapshot_id"],
        created_ms=meta["created_ms"],
        rows_read=rows_read,
        rows_rejected=rejected,
        rows_duplicate=duplicates,
        tasks=meta["tasks"],
        workers=meta["workers"],
        groups=meta["groups"],
        split_candidates=meta["split_candidates"],
        wall_time_s=time.monotonic() - started,
        snapshot_dir=meta["snapshot_dir"],
        extra={"source": "archive", "segments": len(segments), "new_files": len(new)},
    )
