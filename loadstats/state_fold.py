"""The incremental job's state: each micro-batch folded into a new state version, exactly once.

:class:`_BatchFolder` is the stream's ``foreachBatch`` function (``loadstats.stream`` starts the
query): it merges the batch's rows into the per-task and per-worker state
(``loadstats.incremental``), writes the batch as a segment of the compacted archive
(``loadstats.compaction``) and commits a new state version (``loadstats.state``); a batch already
committed (a re-run after a crash) is skipped. The counters here (rows read, rejected, repeated,
late) are the state's meta, carried from version to version.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark at the top.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from groupcoord.loadstats.compaction import BUCKETS, add_segment, batch_files, prune_segments, write_segment
from groupcoord.loadstats.incremental import classify_new_rows, merge_tasks, merge_workers, tag_unknown_workers
from groupcoord.loadstats.state import StateStore, StateView, task_state_ddl, worker_state_ddl
from groupcoord.loadstats.transforms import REJECT_REASONS, tag_rejects

__all__ = ["BatchHook", "RefreshFailed", "one_line"]

log = logging.getLogger("groupcoord.loadstats.stream")  # the name the stream's records had before this split

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
