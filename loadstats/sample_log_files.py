"""The sample log's files on disk: the in-progress file, its roll, orphan recovery and retention.

:class:`SampleFiles` is used by the sample log's writer thread only (``loadstats.sample_log``
owns the queue, the thread and the counters): it appends bytes to a hidden
``.samples-<...>.jsonl.inprogress`` file, renames it to ``samples-<ms>-<pid>-<seq>-<token>.jsonl``
when it rolls (a rename within one directory is atomic, so Spark never reads half a file),
finishes the in-progress files a dead process of this host left behind, and drops the oldest
finished files beyond the retention limits (``loadstats.retention``). Errors and counts go to the
callbacks it is given, so the log's counters stay in one place.

Light (``os`` only), like the sample log: the coordinator imports it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import BinaryIO

from groupcoord.loadstats.retention import enforce_retention

__all__ = ["SampleFiles"]

log = logging.getLogger("groupcoord.loadstats.sample_log")  # the name the log's records had before this split

_SUFFIX = ".jsonl"
_INPROGRESS = ".inprogress"
_RETENTION_CHECK_S = 60.0

#: Told what failed and why (counted and logged by the sample log).
ErrorSink = Callable[[str, BaseException], None]


class SampleFiles:
    """The writer thread's files in ``directory`` (see module docstring).

    ``clock`` (monotonic seconds) drives ``roll_seconds`` and the idle retention check;
    ``wall_clock_ms`` names files and ages them for retention.
    """

    def __init__(
        self,
        directory: str,
        *,
        token: str,
        roll_bytes: int,
        roll_seconds: float,
        clock: Callable[[], float],
        wall_clock_ms: Callable[[], int],
        fsync_on_roll: bool,
        retention_s: float | None,
        retention_bytes: int | None,
        on_error: ErrorSink,
        on_rolled: Callable[[], None],
        on_dropped: Callable[[int, int], None],
    ) -> None:
        self.directory = directory
        self._token = token
        self._roll_bytes = roll_bytes
        self._roll_seconds = roll_seconds
        self._clock = clock
        self._wall_ms = wall_clock_ms
        self._fsync = fsync_on_roll
        self._retention_s = retention_s
        self._retention_bytes = retention_bytes
        self._retention_checked = -float("inf")
        self._on_error = on_error
        self._on_rolled = on_rolled
        self._on_dropped = on_dropped
        self._file: BinaryIO | None = None
        self._tmp_path: str | None = None
        self._file_bytes = 0
        self._file_opened_at = 0.0
        self._seq = 0

    def wait_time(self) -> float:
        """How long the writer may wait for the next report before a roll by time is due (at most 1 s)."""
        if self._file is None:
            return 1.0
        remaining = self._file_opened_at + self._roll_seconds - self._clock()
        return max(0.01, min(1.0, remaining))

    def maybe_roll_by_time(self) -> None:
        """Roll a file open ``roll_seconds``; apply retention once a minute, idle or not."""
        if self._file is not None and self._clock() - self._file_opened_at >= self._roll_seconds:
            self.roll()
        if self._clock() - self._retention_checked >= _RETENTION_CHECK_S:  # age limits apply when idle too
            self.enforce_retention()

    def write(self, data: bytes) -> bool:
        """Append ``data`` to the in-progress file (opened if none); False, the error reported, if it failed.

        After a failure the caller counts its rows and calls :meth:`abandon_partial`.
        """
        try:
            if self._file is None:
                self._open()
            f = self._file
            assert f is not None
            f.write(data)
            f.flush()
        except Exception as exc:  # noqa: BLE001 - never raise into the coordinator
            self._on_error("write failed", exc)
            return False
        self._file_bytes += len(data)
        return True

    def roll_if_full(self) -> None:
        """Roll once the file has ``roll_bytes``: files stay a size Spark reads in one task."""
        if self._file_bytes >= self._roll_bytes:
            self.roll()

    def roll(self) -> None:
        """Sync, close and rename the in-progress file to its final name (nothing to do without one)."""
        f, path = self._file, self._tmp_path
        self._file, self._tmp_path = None, None
        if f is None or path is None:
            return
        try:
            f.flush()
            if self._fsync:
                os.fsync(f.fileno())
            f.close()
            self._finish(path, self._file_bytes)
        except OSError as exc:
            self._on_error("roll failed", exc)

    def abandon_partial(self) -> None:
        """After a failed write: cut the file back to its last complete batch and roll it."""
        f, path = self._file, self._tmp_path
        self._file, self._tmp_path = None, None
        if f is None or path is None:
            return
        try:
            f.close()
        except OSError as exc:
            log.debug("sample log: close after a failed write: %r", exc)
        try:
            os.truncate(path, self._file_bytes)
            self._finish(path, self._file_bytes)
        except OSError as exc:
            self._on_error("could not finish partial file", exc)

    def enforce_retention(self) -> None:
        """Drop the oldest finished files beyond ``retention_s`` or ``retention_bytes``; log one line.

        Only this log's own finished files (``samples-<ms>-...jsonl``) are candidates, oldest first
        by the time in their name; the newest file is always kept. The statistics job's state
        carries the history, so a dropped file costs only what a full rebuild could redo.
        """
        self._retention_checked = self._clock()
        if self._retention_s is None and self._retention_bytes is None:
            return
        try:
            result = enforce_retention(self.directory, self._wall_ms(), self._retention_s, self._retention_bytes,
                                       prefix="samples-", suffix=_SUFFIX)
        except OSError as exc:
            if os.path.isdir(self.directory):
                self._on_error("retention: listing failed", exc)
            return
        if result.error is not None:
            self._on_error("retention: could not drop a file", result.error)
        if result.dropped:
            self._on_dropped(len(result.dropped), result.bytes_dropped)
            log.warning(
                "sample log %s: retention dropped %d file(s), %d bytes (%s .. %s); %d file(s), %d bytes kept "
                "(limits: %s s, %s bytes)",
                self.directory, len(result.dropped), result.bytes_dropped, result.dropped[0], result.dropped[-1],
                result.files_kept, result.bytes_kept, self._retention_s, self._retention_bytes,
            )

    def recover_orphans(self) -> None:
        """Finish ``.inprogress`` files left by dead processes (pids of this host)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if not (name.startswith(".samples-") and name.endswith(_INPROGRESS)):
                continue
            try:
                pid = int(name.split("-")[2])
            except (IndexError, ValueError):
                continue
            if pid == os.getpid() or _pid_alive(pid):  # a live writer's file: leave it
                continue
            path = os.path.join(self.directory, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
                good = data.rfind(b"\n") + 1
                os.truncate(path, good)
                self._finish(path, good)
                log.warning("sample log: recovered %s (%d bytes)", name, good)
            except OSError as exc:
                self._on_error("orphan recovery failed", exc)

    def _open(self) -> None:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)  # load reports are the operator's business only
        self._seq += 1
        name = f".samples-{self._wall_ms():015d}-{os.getpid()}-{self._seq:06d}-{self._token}{_SUFFIX}{_INPROGRESS}"
        path = os.path.join(self.directory, name)
        # 0600: created so, whatever the umask (the mode of os.open only narrows it)
        self._file = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        self._tmp_path = path
        self._file_bytes = 0
        self._file_opened_at = self._clock()

    def _finish(self, tmp_path: str, size: int) -> None:
        if size == 0:
            os.unlink(tmp_path)
            return
        directory, name = os.path.split(tmp_path)
        final = name[1 : -len(_INPROGRESS)]
        os.replace(tmp_path, os.path.join(directory, final))
        self._on_rolled()
        self.enforce_retention()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True
