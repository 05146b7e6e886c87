"""The coordinator's sample log: load reports appended as JSON Lines files Spark reads.

``append()`` never blocks and never raises: it puts the report on a bounded queue and a
background writer thread flattens it (:func:`loadstats.samples.report_rows`) and writes it. When
the queue is full (``queue_size`` reports, or ``max_queued_rows`` rows: one per report plus one
per task entry, so memory stays bounded however large the reports) the report is dropped and
counted. A report may be given as a function that makes it: the writer thread calls it, so the
caller (the coordinator's event loop) does not convert it. Write errors (bad path, permissions, full
disk) are logged (at most once per ``error_log_interval_s``), counted and kept as ``last_error``
in :meth:`SampleLog.stats`; the rows of that batch are counted as failed and the writer keeps
going (it retries on the next batch).

Files. The writer appends to a hidden ``.samples-<...>.jsonl.inprogress`` file in ``directory``
and renames it to ``samples-<created ms>-<pid>-<seq>-<token>.jsonl`` when it rolls: after
``roll_bytes`` bytes, after ``roll_seconds`` seconds, on :meth:`flush` and on :meth:`close`.
Spark ignores names starting with ``.`` or ``_``, and a rename within one directory is atomic,
so the job never reads half a file. A mounted shared filesystem path (NFS, a FUSE-mounted
bucket, ...) works as ``directory`` for a cluster; the job reads the same tree by any URI Spark
understands. At start the log finishes the ``.inprogress`` files that a dead process of the same
host left behind (cut to the last complete line, then renamed).

Retention. The log is bounded: finished files older than ``retention_s`` (default 7 days) or
beyond ``retention_bytes`` in total (default 10 GiB) are deleted, oldest first, after each roll
and once a minute when idle; each deletion logs one WARNING line naming the files and the bytes,
and ``stats()`` counts them (``files_dropped``, ``bytes_dropped``). The incremental statistics
job's state carries the history, so what is dropped is only what a full rebuild would re-read.
A retention error is counted like a write error and never reaches the coordinator.

Why JSON Lines rather than Parquet: reports arrive a few rows at a time; JSON Lines appends
them as they come with bounded memory, and a crash loses at most a partial last line of the
in-progress file (recovered at the next start). A Parquet file only becomes readable once its
footer is written, so everything since the last roll would be lost in a crash, and small rolls
make many tiny files. The job reads both formats; rows per second of a coordinator are far
below what JSON parsing in Spark handles. Non-finite numbers are written as ``NaN`` /
``Infinity`` (Spark reads them) and the job rejects them.

This module owns the queue, the writer thread and the counters; the files on disk (rolling,
orphan recovery, retention) are ``loadstats.sample_log_files``'.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from groupcoord.loadstats.sample_log_files import SampleFiles
from groupcoord.loadstats.samples import LoadReport, report_rows

__all__ = ["DEFAULT_RETENTION_BYTES", "DEFAULT_RETENTION_S", "SampleLog", "SampleLogStats"]

log = logging.getLogger(__name__)

#: Retention defaults: a week (Spark's file stream source forgets files older than that too) and 10 GiB.
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
DEFAULT_RETENTION_BYTES = 10 * 1024**3


@dataclass(frozen=True)
class SampleLogStats:
    """Counters of a :class:`SampleLog`. Rows are sample rows (1 worker row + 1 per task)."""

    rows_written: int
    rows_dropped: int  # queue full, or appended after close()
    rows_failed: int  # lost to write errors
    reports_written: int
    reports_dropped: int
    files_rolled: int
    errors: int
    last_error: str | None
    queued: int
    files_dropped: int = 0  # removed by retention (age or size)
    bytes_dropped: int = 0


class _Marker:
    """A control item on the queue: flush (roll) or stop; ``done`` is set when handled."""

    __slots__ = ("done", "stop")

    def __init__(self, stop: bool) -> None:
        self.stop = stop
        self.done = threading.Event()


class SampleLog:
    """Append-only, rolled JSON Lines sample log with a background writer (see module docstring).

    ``clock`` (monotonic seconds) drives ``roll_seconds``; ``wall_clock_ms`` only names files.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        roll_bytes: int = 64 * 1024 * 1024,
        roll_seconds: float = 60.0,  # reports reach the job within a minute; 1,440 files a day
        queue_size: int = 10_000,
        max_queued_rows: int = 1_000_000,
        batch_size: int = 512,
        clock: Callable[[], float] = time.monotonic,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        error_log_interval_s: float = 60.0,
        fsync_on_roll: bool = True,
        retention_s: float | None = DEFAULT_RETENTION_S,
        retention_bytes: int | None = DEFAULT_RETENTION_BYTES,
    ) -> None:
        if roll_bytes <= 0 or roll_seconds <= 0 or queue_size <= 0 or batch_size <= 0:
            raise ValueError("roll_bytes, roll_seconds, queue_size and batch_size must be > 0")
        if (retention_s is not None and retention_s <= 0) or (retention_bytes is not None and retention_bytes <= 0):
            raise ValueError("retention_s and retention_bytes must be > 0 (or None: unbounded)")
        self.directory = os.fspath(directory)
        self._batch_size = batch_size
        self._clock = clock
        self._error_log_interval = error_log_interval_s
        self._queue: queue.Queue[tuple[str, str, LoadReport | Callable[[], LoadReport], int] | _Marker] = \
            queue.Queue(maxsize=queue_size)
        self._max_queued_rows = max_queued_rows
        self._queued_rows = 0  # under _lock
        self._lock = threading.Lock()
        self._closed = False
        # counters (written under _lock)
        self._rows_written = 0
        self._rows_dropped = 0
        self._rows_failed = 0
        self._reports_written = 0
        self._reports_dropped = 0
        self._files_rolled = 0
        self._files_dropped = 0
        self._bytes_dropped = 0
        self._errors = 0
        self._last_error: str | None = None
        self._last_error_logged = -float("inf")
        self._token = uuid.uuid4().hex[:8]
        # the files on disk (writer thread only, once it runs)
        self._files = SampleFiles(
            self.directory, token=self._token, roll_bytes=roll_bytes, roll_seconds=roll_seconds, clock=clock,
            wall_clock_ms=wall_clock_ms, fsync_on_roll=fsync_on_roll, retention_s=retention_s,
            retention_bytes=retention_bytes, on_error=self._error, on_rolled=self._count_rolled,
            on_dropped=self._count_dropped,
        )
        self._files.recover_orphans()
        self._files.enforce_retention()
        self._thread = threading.Thread(target=self._run, name=f"sample-log-{self._token}", daemon=True)
        self._thread.start()

    # -- caller side ---------------------------------------------------------------------------

    def append(self, group_id: str, worker_id: str, report: LoadReport | Callable[[], LoadReport],
               task_entries: int | None = None) -> None:
        """Queue one report (or a function making it, with its ``task_entries`` count); never blocks,
        never raises (drops and counts when full or closed)."""
        rows = 1 + (task_entries if task_entries is not None else len(getattr(report, "tasks", ())))
        try:
            with self._lock:
                if self._closed or self._queued_rows + rows > self._max_queued_rows:
                    raise queue.Full
                self._queued_rows += rows
            try:
                self._queue.put_nowait((group_id, worker_id, report, rows))
            except queue.Full:
                with self._lock:
                    self._queued_rows -= rows
                raise
        except queue.Full:
            with self._lock:
                self._reports_dropped += 1
                self._rows_dropped += rows
        except Exception:  # pragma: no cover - defensive: append must never raise
            log.exception("sample log: append failed")

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Write everything appended so far and make it visible (roll). True if done in time."""
        if self._closed or not self._thread.is_alive():
            return False
        marker = _Marker(stop=False)
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Write what is queued, roll the last file, stop the writer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        marker = _Marker(stop=True)
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            log.error("sample log: queue still full at close; stopping without draining")
        self._thread.join(timeout)

    def stats(self) -> SampleLogStats:
        with self._lock:
            return SampleLogStats(
                rows_written=self._rows_written,
                rows_dropped=self._rows_dropped,
                rows_failed=self._rows_failed,
                reports_written=self._reports_written,
                reports_dropped=self._reports_dropped,
                files_rolled=self._files_rolled,
                errors=self._errors,
                last_error=self._last_error,
                queued=self._queue.qsize(),
                files_dropped=self._files_dropped,
                bytes_dropped=self._bytes_dropped,
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        """The writer thread: take batches (up to ``batch_size``) off the queue, write them, roll by time,
        and answer flush/close markers once everything before them is written."""
        while True:
            try:
                item = self._queue.get(timeout=self._files.wait_time())
            except queue.Empty:
                self._files.maybe_roll_by_time()
                continue
            batch: list[tuple[str, str, LoadReport | Callable[[], LoadReport], int]] = []
            marker: _Marker | None = None
            while True:
                if isinstance(item, _Marker):
                    marker = item
                    break
                batch.append(item)
                if len(batch) >= self._batch_size:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(batch)
            self._files.maybe_roll_by_time()
            if marker is not None:
                self._files.roll()
                marker.done.set()
                if marker.stop:
                    return

    def _error(self, what: str, exc: BaseException) -> None:
        """Count an error and keep it as ``last_error``; log at most one per ``error_log_interval_s``
        (a full disk would otherwise log on every batch)."""
        message = f"{what}: {exc!r}"
        with self._lock:
            self._errors += 1
            self._last_error = message
        now = self._clock()
        if now - self._last_error_logged >= self._error_log_interval:
            self._last_error_logged = now
            log.error("sample log %s: %s", self.directory, message)

    def _count_rolled(self) -> None:
        with self._lock:
            self._files_rolled += 1

    def _count_dropped(self, files: int, size: int) -> None:
        with self._lock:
            self._files_dropped += files
            self._bytes_dropped += size

    def _write(self, batch: list[tuple[str, str, LoadReport | Callable[[], LoadReport], int]]) -> None:
        """Flatten a batch of reports to JSON lines and append them in one write; a failed write counts
        the batch's rows as failed and finishes the file at its last complete batch."""
        lines: list[bytes] = []
        n_rows = 0
        with self._lock:
            self._queued_rows -= sum(item[3] for item in batch)
        for group_id, worker_id, report, _rows in batch:
            try:
                made = report() if callable(report) else report
                for row in report_rows(group_id, worker_id, made):
                    lines.append(json.dumps(row, separators=(",", ":")).encode())
                    n_rows += 1
            except Exception as exc:  # noqa: BLE001 - a malformed report object: count, keep going
                self._error("bad report", exc)
        if not lines:
            return
        if not self._files.write(b"\n".join(lines) + b"\n"):
            with self._lock:
                self._rows_failed += n_rows
            self._files.abandon_partial()
            return
        with self._lock:
            self._rows_written += n_rows
            self._reports_written += len(batch)
        self._files.roll_if_full()
