"""The incremental load statistics job on Spark Structured Streaming (PySpark).

:func:`run_incremental` reads the sample log with Spark's file stream source. Spark's checkpoint
(``STATE/checkpoint``) records which files each micro-batch took, before the batch runs, and
commits the batch after it, so "what is new" is Spark's bookkeeping, exactly once across
crashes, not ours. Each micro-batch (``foreachBatch``) folds its rows into the per-task and
per-worker state (``loadstats.incremental``) and commits a new state version
(``loadstats.state``); the snapshot is then written from the state, in the full job's layout.
This module owns the stream's source (:func:`read_sample_stream`) and its run (the query, its
trigger, follow mode's stop); the fold is ``loadstats.state_fold``'s, the snapshot
``loadstats.snapshot_writer``'s.

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
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StringType, StructField, StructType

from groupcoord.loadstats.samples import SAMPLE_COLUMNS, sample_spark_schema
from groupcoord.loadstats.session import (
    DEFAULT_MAX_SAMPLE_AGE_S,
    JobResult,
    _is_local_path,
    _local,
    build_session,
)
from groupcoord.loadstats.snapshot_writer import write_snapshot_from_state, write_state_snapshot
from groupcoord.loadstats.state import StateStore, StateView
from groupcoord.loadstats.state_fold import BatchHook, RefreshFailed, _BatchFolder, one_line
from groupcoord.loadstats.transforms import CORRUPT, SplitThresholds

__all__ = ["RefreshFailed", "default_state_path", "one_line", "read_sample_stream", "run_incremental",
           "write_snapshot_from_state", "write_state_snapshot"]

log = logging.getLogger(__name__)


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
    out_path = _checked_out_path(samples_path, out_path, short_samples, long_samples)
    store = _open_state(state_path or default_state_path(out_path), short_samples, long_samples, reset)
    started = time.monotonic()
    own_session = spark is None
    session = spark if spark is not None else build_session(master, driver_memory=driver_memory, extra_conf=spark_conf)
    session_start_s = time.monotonic() - started
    publisher = _Publisher(
        session, out_path, samples_path=samples_path, short_samples=short_samples, long_samples=long_samples,
        max_sample_age_s=max_sample_age_s, thresholds=thresholds, on_snapshot=on_snapshot,
    )
    folder = _BatchFolder(session, store, short_samples, long_samples, after_commit,
                          publisher.publish if follow_every_s else None, before_commit, on_batch, samples_path)
    try:
        writer = read_sample_stream(session, samples_path, max_files_per_trigger).writeStream.foreachBatch(folder)
        writer = writer.option("checkpointLocation", store.checkpoint).queryName(f"loadstats-{uuid.uuid4().hex[:6]}")
        if follow_every_s:
            _run_following(writer, store, out_path, publisher, folder, follow_every_s, stop_event)
        else:
            _run_once(writer, store, out_path, publisher, folder)
        last_meta = publisher.last_meta
        if not last_meta:  # nothing new and the snapshot is the state's: report it as it is
            with open(os.path.join(out_path, "_meta.json"), encoding="utf-8") as f:
                last_meta = json.load(f)
    finally:
        if own_session:
            session.stop()
    return _incremental_result(samples_path, out_path, last_meta, folder, store, started, session_start_s)


def _checked_out_path(samples_path: str, out_path: str, short_samples: int, long_samples: int) -> str:
    """The snapshot's absolute path, once the arguments are checked: bad input fails with one clear
    error before a Spark session (seconds of JVM start) is built for nothing."""
    if short_samples < 1 or long_samples < 1:
        raise ValueError(f"sample caps must be >= 1 (short={short_samples}, long={long_samples})")
    if _is_local_path(samples_path) and not os.path.isdir(_local(samples_path)):
        raise FileNotFoundError(f"samples path {samples_path!r} does not exist (or is not a directory)")
    if not _is_local_path(out_path):
        raise ValueError(f"out_path must be a local or mounted path, got {out_path!r}")
    return os.path.abspath(_local(out_path))


def _open_state(state_path: str, short_samples: int, long_samples: int, reset: bool) -> StateStore:
    """The state store, reset first if asked; its directory made.

    Why the caps are checked here: the state's averages were folded with its own caps, and mixing
    caps would silently give averages over windows of two sizes.
    """
    store = StateStore(state_path)
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
    return store


class _Publisher:
    """Writes the snapshot of a state version and keeps its meta: the run reports the last one
    published, and follow mode's ``on_snapshot`` hears of each."""

    def __init__(self, session: SparkSession, out_path: str, *, samples_path: str, short_samples: int,
                 long_samples: int, max_sample_age_s: float | None, thresholds: SplitThresholds | None,
                 on_snapshot: Callable[[dict[str, Any]], None] | None) -> None:
        self.session, self.out_path, self.samples_path = session, out_path, samples_path
        self.short_samples, self.long_samples = short_samples, long_samples
        self.max_sample_age_s, self.thresholds, self.on_snapshot = max_sample_age_s, thresholds, on_snapshot
        self.last_meta: dict[str, Any] = {}

    def publish(self, view: StateView | None) -> None:
        self.last_meta = write_state_snapshot(
            self.session, view, self.out_path, samples_path=self.samples_path, short_samples=self.short_samples,
            long_samples=self.long_samples, max_sample_age_s=self.max_sample_age_s, thresholds=self.thresholds,
        )
        if self.on_snapshot is not None:
            self.on_snapshot(self.last_meta)


def _run_following(writer: DataStreamWriter, store: StateStore, out_path: str, publisher: _Publisher,
                   folder: _BatchFolder, follow_every_s: float, stop_event: threading.Event | None) -> None:
    """Follow mode: a micro-batch every ``follow_every_s`` (each publishes its snapshot) until stopped.

    The state is published first when the snapshot lags it (a crash between a state's commit and
    its snapshot), since no batch may come to do it. A failed batch raises :class:`RefreshFailed`
    with its kind, which the query's own error has lost.
    """
    current = store.current()
    if current is not None and _snapshot_batch(out_path) != current.batch_id:  # before any batch: nothing yet
        publisher.publish(current)
    query = writer.trigger(processingTime=f"{follow_every_s} seconds").start()
    try:
        _follow(query, stop_event or threading.Event())
    except Exception as exc:
        if folder.failure is not None:  # the kind, which the query's own error has lost
            raise folder.failure from exc
        raise


def _run_once(writer: DataStreamWriter, store: StateStore, out_path: str, publisher: _Publisher,
              folder: _BatchFolder) -> None:
    """Once mode: every file present now, then stop; one snapshot at the end, written only when a
    batch ran or the snapshot is not the state's (a run with nothing new rewrites nothing)."""
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    current = store.current()
    if not publisher.last_meta and (folder.batches or _snapshot_batch(out_path) != (current or _NO_STATE).batch_id):
        publisher.publish(current)


def _incremental_result(samples_path: str, out_path: str, last_meta: Mapping[str, Any], folder: _BatchFolder,
                        store: StateStore, started: float, session_start_s: float) -> JobResult:
    """The run's result, read from the snapshot's meta (the state's totals) plus what this run folded."""
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
