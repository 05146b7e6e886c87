"""The incremental load statistics job on Spark Structured Streaming (PySpark).

:func:`run_incremental` reads the sample log with Spark's file stream source. Spark's checkpoint
(``STATE/checkpoint``) records which files each micro-batch took, before the batch runs, and
commits the batch after it, so "what is new" is Spark's bookkeeping, exactly once across
crashes, not ours. Each micro-batch (``foreachBatch``) folds its rows into the per-task and
per-worker state (``loadstats.incremental``) and commits a new state version
(``loadstats.state``); the snapshot is then written from the state, in the full job's layout.

* once (``follow_every_s=None``): ``Trigger.AvailableNow`` - every file present at the start,
  then stop; one snapshot at the end.
* follow: a processing-time trigger every ``follow_every_s``; the session, its JVM and its
  caches stay warm, and every micro-batch (there is one only when files arrived) publishes a
  snapshot.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark at the top.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from groupcoord.loadstats.compaction import BUCKETS, add_segment, batch_files, prune_segments, write_segment
from groupcoord.loadstats.incremental import (
    classify_new_rows,
    merge_tasks,
    merge_workers,
    state_snapshot_tasks,
    state_snapshot_workers,
    tag_unknown_workers,
)
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, sample_spark_schema
from groupcoord.loadstats.session import (
    DEFAULT_MAX_SAMPLE_AGE_S,
    JobResult,
    _is_local_path,
    _local,
    _swap_into_place,
    build_session,
)
from groupcoord.loadstats.state import StateStore, StateView, task_state_ddl, worker_state_ddl
from groupcoord.loadstats.transforms import CORRUPT, REJECT_REASONS, SplitThresholds, split_candidates, tag_rejects

__all__ = ["RefreshFailed", "default_state_path", "one_line", "read_sample_stream", "run_incremental",
           "write_snapshot_from_state", "write_state_snapshot"]

log = logging.getLogger(__name__)

#: Called with the batch id just before (``before_commit``) and right after (``after_commit``) a
#: state version is committed; tests kill the process there to prove a re-run neither loses nor
#: double counts.
BatchHook = Callable[[int], None]


class RefreshFailed(Exception):
    """A micro-batch or a snapshot failed; ``kind`` is one of ``loadstats.follow_metrics.FAILURE_KINDS``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def one_line(exc: BaseException) -> str:
    """An error as one short line: its type and the first line of its message (Java errors are long)."""
    text = str(exc).strip().splitlines()
    first = next((line.strip() for line in text if line.strip()), "")
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def default_state_path(out_path: str) -> str:
    """``OUT.state`` beside the snapshot."""
    return os.path.abspath(_local(out_path)).rstrip("/") + ".state"


def read_sample_stream(spark: SparkSession, samples_path: str, max_files_per_trigger: int | None = None) -> DataFrame:
    """The sample log as a stream: JSON Lines and Parquet files directly under ``samples_path``.

    Names starting with ``.`` or ``_`` (the sample log's in-progress files) are never read.
    """
    schema = sample_spark_schema()
    json_schema = StructType([*schema.fields, StructField(CORRUPT, StringType())])

    def reader() -> Any:
        r = spark.readStream
        if max_files_per_trigger:
            r = r.option("maxFilesPerTrigger", str(max_files_per_trigger))
        return r

    jsonl = (
        reader()
        .schema(json_schema)
        .option("pathGlobFilter", "*.{jsonl,json}")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(samples_path)
    )
    parquet = reader().schema(schema).option("pathGlobFilter", "*.parquet").parquet(samples_path)
    parquet = parquet.select(*SAMPLE_COLUMNS, F.lit(None).cast("string").alias(CORRUPT))
    return parquet.unionByName(jsonl.select(*SAMPLE_COLUMNS, CORRUPT))


def _state_frames(spark: SparkSession, view: StateView | None) -> tuple[DataFrame, DataFrame]:
    if view is None:
        return spark.createDataFrame([], task_state_ddl()), spark.createDataFrame([], worker_state_ddl())
    return (
        spark.read.parquet("file://" + os.path.join(view.version_dir, "tasks")),
        spark.read.parquet("file://" + os.path.join(view.version_dir, "workers")),
    )


def _empty_counters() -> dict[str, Any]:
    return {"rows_read": 0, "rows_rejected": dict.fromkeys(REJECT_REASONS, 0), "rows_duplicate": 0, "rows_late": 0}


class _BatchFolder:
    """The ``foreachBatch`` function: fold one micro-batch into the state, exactly once."""

    def __init__(self, spark: SparkSession, store: StateStore, short_samples: int, long_samples: int,
                 after_commit: BatchHook | None, on_state: Callable[[StateView], None] | None,
                 before_commit: BatchHook | None = None,
                 on_batch: Callable[[dict[str, Any]], None] | None = None, samples_path: str = "") -> None:
        self.spark, self.store = spark, store
        self.samples_path = samples_path
        self.short, self.long = short_samples, long_samples
        self.after_commit, self.on_state, self.before_commit = after_commit, on_state, before_commit
        self.on_batch = on_batch
        self.batches = 0
        self.skipped = 0
        self.run_counters = _empty_counters()
        #: The first failure of a batch, with its kind: Spark hands the query's error back as a
        #: StreamingQueryException whose Python type is lost, so the kind is kept here.
        self.failure: RefreshFailed | None = None

    @contextmanager
    def _failing_as(self, kind: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            if self.failure is None:
                self.failure = RefreshFailed(kind, one_line(exc))
            raise

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        with self._failing_as("batch"):
            self._fold(batch, batch_id)

    def _fold(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if self.store.applied(batch_id):  # crash after our commit, before Spark's: already counted
            log.warning("micro-batch %d is already in the state (re-run after a crash): skipped", batch_id)
            self.skipped += 1
            return
        view = self.store.current()
        tasks0, workers0 = _state_frames(self.spark, view)
        with self._failing_as("state_dir"):
            tmp = self.store.new_version_dir(batch_id)
        # Spark's Observation never completes inside foreachBatch (the batch runs in the stream's
        # own session), so counts are explicit aggregates; the input is cached once for the passes.
        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        describe = self.spark.sparkContext.setJobDescription  # the Spark UI tells the state's passes from the archive's
        try:
            describe("loadstats: fold: state")
            tagged = tag_rejects(batch)
            merge_workers(workers0, tagged.where(F.col("task_id").isNull())).write.parquet(
                "file://" + os.path.join(tmp, "workers")
            )
            workers = self.spark.read.parquet("file://" + os.path.join(tmp, "workers"))
            checked = tag_unknown_workers(tagged, workers)
            reasons = {r["_reject"]: int(r["count"]) for r in checked.groupBy("_reject").count().collect()}
            good = checked.where(F.col("task_id").isNotNull() & F.col("_reject").isNull()).drop("_reject")
            classified = classify_new_rows(good, tasks0).persist(StorageLevel.MEMORY_AND_DISK)
            kinds = {r["_kind"]: int(r["count"]) for r in classified.groupBy("_kind").count().collect()}
            merge_tasks(classified, tasks0, self.short, self.long).write.parquet(
                "file://" + os.path.join(tmp, "tasks")
            )
            classified.unpersist()
            describe("loadstats: fold: archive")
            archive = self._compact(tagged, batch_id, view, reasons)
        finally:
            describe(None)  # type: ignore[arg-type]  # PySpark clears the description with None
            batch.unpersist()
        delta = {
            "rows_read": sum(reasons.values()),
            "rows_rejected": {r: reasons.get(r, 0) for r in REJECT_REASONS},
            "rows_duplicate": kinds.get("repeat", 0),
            "rows_late": kinds.get("late", 0),
        }
        before = dict(view.meta) if view is not None else {}
        meta = _add(_add(_empty_counters(), before), delta)
        meta.update(short_samples_max=self.short, long_samples_max=self.long, compacted=archive)
        if self.before_commit is not None:
            self.before_commit(batch_id)
        with self._failing_as("state_dir"):
            committed = self.store.commit(batch_id, tmp, meta)
        prune_segments(self.store.segments, archive["segments"])
        if self.on_batch is not None:  # now, not after the snapshot: a crash in between must not lose the count
            self.on_batch({"stage": "committed", "batch_id": batch_id, **delta})
        self.run_counters = _add(self.run_counters, delta)
        self.batches += 1
        if delta["rows_late"]:
            log.warning("micro-batch %d: %d late task sample(s) left out (older than their task's state)",
                        batch_id, delta["rows_late"])
        if self.after_commit is not None:
            self.after_commit(batch_id)
        if self.on_state is not None:
            with self._failing_as("snapshot_dir"):
                self.on_state(committed)
        if self.on_batch is not None:
            self.on_batch({"stage": "published", "batch_id": batch_id, "seconds": time.monotonic() - started})


    def _compact(self, tagged: DataFrame, batch_id: int, view: StateView | None, reasons: Mapping[str | None, int]
                 ) -> dict[str, Any]:
        """Write the batch's rows as a segment of the compacted archive; return the archive's
        entry for ``CURRENT`` (listed only when the state commits, see ``loadstats.compaction``)."""
        before = dict(view.meta.get("compacted") or {}) if view is not None else {}
        listed = list(before.get("segments", []))
        buckets = int(before.get("buckets", BUCKETS))
        if before.get("samples_path", self.samples_path) != self.samples_path:
            listed = []  # the state now follows another log: start the archive again
        # row-level counts: a task row of a worker unknown *now* is valid here (the rebuild decides)
        counts = {r: c for r, c in reasons.items() if r != "unknown_worker"}
        counts[None] = counts.get(None, 0) + reasons.get("unknown_worker", 0)
        os.makedirs(self.store.segments, exist_ok=True)
        files = batch_files(self.store.checkpoint, batch_id)
        segment = write_segment(tagged, self.store.segments, batch_id, files, counts=counts, buckets=buckets)
        segments = add_segment(self.store.segments, listed, segment, buckets)
        return {"buckets": buckets, "samples_path": self.samples_path, "segments": segments}


def _add(base: dict[str, Any], more: Any) -> dict[str, Any]:
    out = dict(base)
    for key in ("rows_read", "rows_duplicate", "rows_late"):
        out[key] = int(base.get(key, 0)) + int(more.get(key, 0))
    out["rows_rejected"] = {
        r: int(base.get("rows_rejected", {}).get(r, 0)) + int(more.get("rows_rejected", {}).get(r, 0))
        for r in REJECT_REASONS
    }
    return out


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


def _snapshot_batch(out_path: str) -> int | None:
    """The state batch the current snapshot was written from (None: none, or a full rebuild's)."""
    try:
        with open(os.path.join(out_path, "_meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    value = meta.get("state_batch_id")
    return int(value) if value is not None else None


def run_incremental(
    samples_path: str,
    out_path: str,
    *,
    state_path: str | None = None,
    master: str | None = "local[*]",
    short_samples: int = 10,
    long_samples: int = 1000,
    max_sample_age_s: float | None = DEFAULT_MAX_SAMPLE_AGE_S,
    spark: SparkSession | None = None,
    thresholds: SplitThresholds | None = None,
    follow_every_s: float | None = None,
    max_files_per_trigger: int | None = None,
    reset: bool = False,
    before_commit: BatchHook | None = None,
    after_commit: BatchHook | None = None,
    on_snapshot: Callable[[dict[str, Any]], None] | None = None,
    stop_event: threading.Event | None = None,
    driver_memory: str | None = "4g",
    spark_conf: Mapping[str, str] | None = None,
    on_batch: Callable[[dict[str, Any]], None] | None = None,
) -> JobResult:
    """Fold the sample files not yet seen into the state and write the snapshot from it.

    ``state_path`` defaults to ``OUT.state``. ``reset=True`` forgets the state and the checkpoint
    first (the next run reads the whole log). The state remembers its caps: other caps raise
    ``ValueError`` (reset, or run ``--full``). Once mode returns when the files present at the
    start are folded in; follow mode (``follow_every_s``) runs until SIGINT/SIGTERM (when
    called from the main thread) or ``stop_event`` is set, and calls ``on_snapshot(meta)`` per
    published snapshot. ``on_batch(event)`` is called twice per micro-batch: right after the
    state's commit (``stage="committed"``: ``rows_read``, ``rows_rejected``, ``rows_duplicate``,
    ``rows_late``) and after its snapshot (``stage="published"``: ``seconds`` for the whole
    refresh). A failed micro-batch
    or snapshot raises :class:`RefreshFailed` (its kind) when the query stops on it.
    """
    if short_samples < 1 or long_samples < 1:
        raise ValueError(f"sample caps must be >= 1 (short={short_samples}, long={long_samples})")
    if _is_local_path(samples_path) and not os.path.isdir(_local(samples_path)):
        raise FileNotFoundError(f"samples path {samples_path!r} does not exist (or is not a directory)")
    if not _is_local_path(out_path):
        raise ValueError(f"out_path must be a local or mounted path, got {out_path!r}")
    out_path = os.path.abspath(_local(out_path))
    store = StateStore(state_path or default_state_path(out_path))
    if reset:
        store.reset()
    view = store.current()
    if view is not None and (view.meta.get("short_samples_max"), view.meta.get("long_samples_max")) != (
        short_samples, long_samples,
    ):
        raise ValueError(
            f"the state at {store.root} was built with caps ({view.meta.get('short_samples_max')}, "
            f"{view.meta.get('long_samples_max')}), not ({short_samples}, {long_samples}): reset it (--reset)"
        )
    os.makedirs(store.root, exist_ok=True)
    started = time.monotonic()
    own_session = spark is None
    session = spark if spark is not None else build_session(master, driver_memory=driver_memory, extra_conf=spark_conf)
    session_start_s = time.monotonic() - started
    last_meta: dict[str, Any] = {}

    def publish(v: StateView | None) -> None:
        nonlocal last_meta
        last_meta = write_state_snapshot(
            session, v, out_path, samples_path=samples_path, short_samples=short_samples,
            long_samples=long_samples, max_sample_age_s=max_sample_age_s, thresholds=thresholds,
        )
        if on_snapshot is not None:
            on_snapshot(last_meta)

    folder = _BatchFolder(session, store, short_samples, long_samples, after_commit,
                          publish if follow_every_s else None, before_commit, on_batch, samples_path)
    try:
        writer = read_sample_stream(session, samples_path, max_files_per_trigger).writeStream.foreachBatch(folder)
        writer = writer.option("checkpointLocation", store.checkpoint).queryName(f"loadstats-{uuid.uuid4().hex[:6]}")
        if follow_every_s:
            current = store.current()
            if current is not None and _snapshot_batch(out_path) != current.batch_id:  # before any batch: nothing yet
                publish(current)
            query = writer.trigger(processingTime=f"{follow_every_s} seconds").start()
            try:
                _follow(query, stop_event or threading.Event())
            except Exception as exc:
                if folder.failure is not None:  # the kind, which the query's own error has lost
                    raise folder.failure from exc
                raise
        else:
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
            current = store.current()
            if not last_meta and (folder.batches or _snapshot_batch(out_path) != (current or _NO_STATE).batch_id):
                publish(current)
        if not last_meta:  # nothing new and the snapshot is the state's: report it as it is
            with open(os.path.join(out_path, "_meta.json"), encoding="utf-8") as f:
                last_meta = json.load(f)
    finally:
        if own_session:
            session.stop()
    return JobResult(
        samples_path=samples_path,
        out_path=out_path,
        snapshot_id=str(last_meta.get("snapshot_id", "")),
        created_ms=int(last_meta.get("created_ms", 0)),
        rows_read=int(last_meta.get("rows_read", 0)),
        rows_rejected=dict(last_meta.get("rows_rejected", {})),
        rows_duplicate=int(last_meta.get("rows_duplicate", 0)),
        tasks=int(last_meta.get("tasks", 0)),
        workers=int(last_meta.get("workers", 0)),
        groups=int(last_meta.get("groups", 0)),
        split_candidates=int(last_meta.get("split_candidates", 0)),
        wall_time_s=time.monotonic() - started,
        snapshot_dir=str(last_meta.get("snapshot_dir", "")),
        extra={
            "mode": "incremental",
            "batches": folder.batches,
            "batches_skipped": folder.skipped,
            "rows_new": folder.run_counters["rows_read"],
            "rows_late_new": folder.run_counters["rows_late"],
            "rows_late": int(last_meta.get("rows_late", 0)),
            "state_batch_id": last_meta.get("state_batch_id"),
            "state_path": store.root,
            "session_start_s": session_start_s,  # JVM + session start, part of wall_time_s (0 when warm)
        },
    )


_NO_STATE = StateView(-1, "", {})
_STOP_GRACE_S = 120.0


def _follow(query: Any, stop: threading.Event) -> None:
    """Wait for the follow query until ``stop`` is set (or SIGINT/SIGTERM sets it), then stop it.

    Why our own signal handlers: PySpark's SIGINT handler raises KeyboardInterrupt inside
    whatever py4j call is in flight, which tears the gateway connection mid-command; a flag
    checked between short waits stops the query cleanly between micro-batches.
    """
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.is_set() and query.isActive:
            query.awaitTermination(1)
        log.info("stopping the load statistics stream after the current micro-batch")
        deadline = time.monotonic() + _STOP_GRACE_S  # a batch cut short is redone next time; a whole one is cheaper
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    query.awaitTermination()  # raises the query's error, if it failed
