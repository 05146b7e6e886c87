"""``groupcoord stats --follow`` as a service: the incremental job kept alive through its failures.

:func:`follow` runs :func:`loadstats.stream.run_incremental` in follow mode and, when a refresh
fails, logs ONE line, counts it by kind (``loadstats.follow_metrics``) and starts again at the
next interval: the state and Spark's checkpoint make the retried batch count once. A session
whose JVM is gone (killed, out of memory) is replaced by a new one. SIGTERM or SIGINT stops it
between micro-batches (a batch under way finishes first), so a supervisor can stop and restart
it at any time.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark (through ``stream``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import SparkSession

from groupcoord.loadstats.compaction import source_log_entries
from groupcoord.loadstats.follow_metrics import FollowMetrics
from groupcoord.loadstats.session import DEFAULT_MAX_SAMPLE_AGE_S, _is_local_path, _local, build_session
from groupcoord.loadstats.state import StateStore
from groupcoord.loadstats.stream import RefreshFailed, default_state_path, one_line, run_incremental
from groupcoord.loadstats.transforms import SplitThresholds

__all__ = ["files_behind", "follow", "session_alive"]

log = logging.getLogger(__name__)

_SAMPLE_SUFFIXES = (".parquet", ".jsonl", ".json")


def files_behind(samples_path: str, checkpoint: str, applied_batch: int) -> int:
    """Sample files directly under ``samples_path`` that no applied micro-batch has taken.

    Spark's file source logs each batch's files under ``CHECKPOINT/sources/<n>/`` (a ``v1``
    line, then a JSON object per file with ``path`` and ``batchId``; every tenth log compacted
    into ``<batch>.compact``). 0 for a path Spark reads that is not local.
    """
    if not _is_local_path(samples_path):
        return 0
    root = _local(samples_path)
    try:
        present = {n for n in os.listdir(root) if n.endswith(_SAMPLE_SUFFIXES) and not n.startswith((".", "_"))}
    except FileNotFoundError:
        return 0
    taken: set[str] = set()
    for item in source_log_entries(checkpoint):
        if int(item.get("batchId", 1 << 62)) <= applied_batch and "path" in item:
            taken.add(os.path.basename(urllib.parse.unquote(urllib.parse.urlparse(item["path"]).path)))
    return len(present - taken)


def _drop_py4j_records(record: logging.LogRecord) -> bool:
    """False for a record py4j logged itself: its gateway logs a broken connection through the root logger
    (``logging.exception``), so the ``py4j`` logger's level does not reach it."""
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def session_alive(spark: SparkSession) -> bool:
    """True while the session's JVM answers (a cheap call through the py4j gateway)."""
    try:
        jvm = spark.sparkContext._jvm
        return jvm is not None and int(jvm.java.lang.System.currentTimeMillis()) > 0
    except Exception:  # noqa: BLE001 - py4j raises several kinds for a gateway that is gone
        return False


def _forget_session(spark: SparkSession | None) -> None:
    """Drop a session whose JVM is gone, so that the next ``getOrCreate`` starts a new JVM.

    Why not ``spark.stop()``: it calls into the dead JVM and fails; PySpark keeps the context,
    the gateway and the session in class attributes, which a new builder would reuse.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        for close in (gateway.shutdown_callback_server, gateway.shutdown):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - best effort: the other side is gone
                log.debug("closing the lost session's gateway: %s", one_line(exc))
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def _snapshot_created_ms(out_path: str) -> int | None:
    try:
        with open(os.path.join(_local(out_path), "_meta.json"), encoding="utf-8") as f:
            return int(json.load(f)["created_ms"])
    except (OSError, ValueError, KeyError):
        return None


def _quiet_query_errors(spark: SparkSession) -> None:
    """Leave a failed query's report to our one line: Spark logs it again at ERROR with the whole
    Java and Python stack, and PySpark prints more (all kept with ``--log-level debug``)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.streaming", jvm.org.apache.logging.log4j.Level.OFF
    )
    # PySpark's accumulator server (a socketserver) prints a traceback when the JVM's end of its
    # socket closes, e.g. when the JVM is killed: one debug line instead
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda _request, address: log.debug("accumulator connection from %s lost", address)


def _failure_kind(exc: BaseException, spark: SparkSession | None, state_root: str) -> str:
    if spark is not None and not session_alive(spark):
        return "spark_session"
    if isinstance(exc, RefreshFailed):
        return exc.kind
    if isinstance(exc, OSError):
        name = str(getattr(exc, "filename", "") or "")
        return "state_dir" if name.startswith(state_root) else "snapshot_dir"
    return "batch"


def _stop_on_signals(stop: threading.Event) -> dict[signal.Signals, Any]:
    """SIGINT and SIGTERM set ``stop`` (from the main thread only: Python allows no handler
    elsewhere); returns the handlers they replaced, restored when following stops."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    return previous


def _watch_backlog(metrics: FollowMetrics, store: StateStore, samples_path: str, out_path: str) -> None:
    """Give the metrics the files not yet folded in, and the snapshot already there: the age
    gauge is right from the start, before the first refresh publishes."""

    def behind() -> int:
        current = store.current()
        return files_behind(samples_path, store.checkpoint, current.batch_id if current else -1)

    metrics.count_files_behind(behind)
    existing = _snapshot_created_ms(out_path)
    if existing is not None:
        metrics.snapshot_written(existing)


def _report_failure(exc: Exception, session: SparkSession | None, state_root: str, wait: float,
                    metrics: FollowMetrics | None) -> str:
    """Log a failed refresh in one line and count it by kind; returns the kind (a lost Spark
    session is rebuilt before the retry)."""
    kind = _failure_kind(exc, session, state_root)
    text = exc.message if isinstance(exc, RefreshFailed) else one_line(exc)
    log.error("refresh failed (%s): %s; retrying in %gs", kind, text, wait)
    if metrics is not None:
        metrics.failed(kind)
    return kind


def follow(
    samples_path: str,
    out_path: str,
    *,
    every_s: float,
    master: str | None = "local[*]",
    spark_conf: Mapping[str, str] | None = None,
    state_path: str | None = None,
    reset: bool = False,
    short_samples: int = 10,
    long_samples: int = 1000,
    max_sample_age_s: float | None = DEFAULT_MAX_SAMPLE_AGE_S,
    thresholds: SplitThresholds | None = None,
    on_snapshot: Callable[[dict[str, Any]], None] | None = None,
    metrics: FollowMetrics | None = None,
    stop_event: threading.Event | None = None,
    driver_memory: str | None = "4g",
    retry_s: float | None = None,
) -> int:
    """Follow the sample log until SIGTERM/SIGINT (from the main thread) or ``stop_event``; return the failures.

    A failed refresh is logged in one line and counted; the next attempt starts after
    ``retry_s`` (default ``every_s``). Bad arguments (``ValueError``, ``FileNotFoundError``)
    are raised, not retried.
    """
    stop = stop_event or threading.Event()
    quiet = not log.isEnabledFor(logging.DEBUG)
    if quiet:
        # py4j logs a failed foreachBatch (ERROR) and a lost gateway (INFO) with whole tracebacks:
        # the failure's one line below says what happened
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        logging.getLogger().addFilter(_drop_py4j_records)
    state_root = os.path.abspath(state_path or default_state_path(out_path))
    store = StateStore(state_root)
    previous = _stop_on_signals(stop)

    def snapshot_written(meta: dict[str, Any]) -> None:
        if metrics is not None:
            metrics.snapshot_written(int(meta["created_ms"]))
        if on_snapshot is not None:
            on_snapshot(meta)

    if metrics is not None:
        _watch_backlog(metrics, store, samples_path, out_path)
    session: SparkSession | None = None
    failures = 0
    first = True
    try:
        while not stop.is_set():
            try:
                if session is None:
                    session = build_session(master, driver_memory=driver_memory, extra_conf=spark_conf)
                    if not log.isEnabledFor(logging.DEBUG):
                        _quiet_query_errors(session)
                do_reset, first = reset and first, False
                run_incremental(
                    samples_path, out_path, state_path=state_root, reset=do_reset, spark=session,
                    short_samples=short_samples, long_samples=long_samples, max_sample_age_s=max_sample_age_s,
                    thresholds=thresholds, follow_every_s=every_s, on_snapshot=snapshot_written,
                    on_batch=metrics.refreshed if metrics is not None else None, stop_event=stop,
                )
            except (ValueError, FileNotFoundError):
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is logged, counted and retried
                failures += 1
                wait = every_s if retry_s is None else retry_s
                kind = _report_failure(exc, session, state_root, wait, metrics)
                if kind == "spark_session":
                    _forget_session(session)
                    session = None
                stop.wait(wait)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if session is not None and session_alive(session):
            session.stop()
        logging.getLogger().removeFilter(_drop_py4j_records)
    current = store.current()
    log.info("stopped following %s (state at micro-batch %s)", samples_path, current.batch_id if current else None)
    return failures
