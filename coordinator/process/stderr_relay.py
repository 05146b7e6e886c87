"""The serve process's stderr, read by the process itself: gRPC's handshake lines become our events.

gRPC's C core writes its log to file descriptor 2 directly, so the only place to catch a failed
TLS handshake (see ``coordinator.process.grpc_log``) is that descriptor. ``start_relay`` moves
the real stderr to a new descriptor (``sys.stderr`` and the log handlers follow it), puts a pipe
in its place, and reads the pipe on two daemon threads:

- the reader only takes bytes off the pipe and queues their lines; when the queue is full
  (``max_lines``) it drops the line and counts it, so gRPC is never kept waiting on us;
- the writer turns lines into outputs (``GrpcLogReader``): a failed handshake is logged through
  ``groupcoord.tls`` (event ``tls_handshake_failed``, ``peer``, ``reason``, ``detail``), the
  trace lines we asked for are dropped, and every other line is written on unchanged.

The pipe's write end is non-blocking and 1 MiB deep where Linux allows: a relay starved of the
GIL makes gRPC lose log lines, not stall a handshake. ``stop`` puts the real stderr back and
drains what is left.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import logging
import os
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, MutableMapping
from typing import TextIO

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as Metric

from groupcoord.coordinator.process.grpc_log import (
    REASONS,
    GrpcLogReader,
    HandshakeFailure,
    Output,
    handshake_trace_env,
)

__all__ = ["StderrRelay", "current", "relay_metrics", "start_relay"]

log = logging.getLogger("groupcoord.tls")

_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_END = None  # the reader's last item: the pipe closed

_current: StderrRelay | None = None


def current() -> StderrRelay | None:
    """The relay this process started (``None``: gRPC writes to stderr itself)."""
    return _current


def start_relay(environ: MutableMapping[str, str], *, max_lines: int = 10_000, idle_s: float = 0.1) -> StderrRelay:
    """Ask gRPC for the handshaker trace (in ``environ``, read when gRPC is first imported: call this
    before) and take over file descriptor 2. One per process."""
    global _current
    if _current is not None:
        return _current
    changes = handshake_trace_env(environ)
    if changes is not None:
        environ.update(changes)
    _current = StderrRelay(GrpcLogReader(traced=True, drop_trace=changes is not None), max_lines=max_lines,
                           idle_s=idle_s)
    return _current


def relay_metrics(registry: CollectorRegistry) -> tuple[Metric, Metric]:
    """The relay's counters on ``registry``: failed handshakes by reason (every reason at 0 from
    the start) and stderr lines dropped."""
    failures = Metric("groupcoord_tls_handshake_failures", "TLS handshakes that failed, by what most likely "
                      "went wrong (not_tls, no_client_certificate, untrusted_client_certificate, "
                      "client_refused_server_certificate, closed, timeout, other)", ["reason"], registry=registry)
    for reason in sorted(REASONS):
        failures.labels(reason)
    dropped = Metric("groupcoord_stderr_lines_dropped", "Lines of the serve process's stderr its relay dropped "
                     "because its queue was full", registry=registry)
    return failures, dropped


class StderrRelay:
    """Owns descriptor 2 while it runs; see the module's docstring."""

    def __init__(self, reader: GrpcLogReader, *, max_lines: int, idle_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lines = reader
        self._idle_s = idle_s
        self._clock = clock
        self._queue: queue.Queue[str | None] = queue.Queue(max_lines)
        self.failures: Counter[str] = Counter()  # by reason
        self.dropped = 0  # lines lost because the queue was full
        self.on_failure: Callable[[HandshakeFailure], None] = lambda failure: None
        self.on_drop: Callable[[], None] = lambda: None
        sys.stderr.flush()
        self._real_fd = os.dup(2)
        self.real: TextIO = open(self._real_fd, "w", encoding="utf-8", errors="backslashreplace",  # noqa: SIM115
                                 buffering=1, closefd=False)
        self._old_stderr = sys.stderr
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError):  # a smaller pipe (not Linux, or over the user's limit) still works
            fcntl.fcntl(write_fd, _F_SETPIPE_SZ, _PIPE_BYTES)
        os.set_blocking(write_fd, False)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._read_fd = read_fd
        sys.stderr = self.real
        if faulthandler.is_enabled():  # a crash report must not go into a pipe whose reader dies with us
            faulthandler.enable(file=self.real)
        for handler in logging.getLogger().handlers:  # handlers made before the swap
            if isinstance(handler, logging.StreamHandler) and handler.stream is self._old_stderr:
                handler.setStream(self.real)
        self._reader = threading.Thread(target=self._read, name="stderr-relay-read", daemon=True)
        self._writer = threading.Thread(target=self._write, name="stderr-relay-write", daemon=True)
        self._reader.start()
        self._writer.start()

    def count_in(self, registry: CollectorRegistry) -> None:
        """Count failures and dropped lines (``relay_metrics``) on ``registry`` from now on."""
        failures, dropped = relay_metrics(registry)
        self.on_failure = lambda failure: failures.labels(failure.reason).inc()
        self.on_drop = dropped.inc

    def stop(self, timeout_s: float = 2.0) -> None:
        """Give descriptor 2 back (the pipe then ends) and write out what was still in it."""
        global _current
        os.dup2(self._real_fd, 2)  # closes the pipe's write end: the reader sees the end
        self._reader.join(timeout_s)
        self._writer.join(timeout_s)
        sys.stderr = self._old_stderr
        self.real.flush()
        if _current is self:
            _current = None

    def _read(self) -> None:
        partial = b""
        while True:
            try:
                chunk = os.read(self._read_fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                self._offer(line.decode("utf-8", "backslashreplace") + "\n")
        if partial:
            self._offer(partial.decode("utf-8", "backslashreplace"))
        os.close(self._read_fd)
        self._queue.put(_END)

    def _offer(self, line: str) -> None:
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1
            self.on_drop()

    def _write(self) -> None:
        while True:
            try:
                line = self._queue.get(timeout=self._idle_s)
            except queue.Empty:
                self._emit(self._lines.flush(self._clock()))
                continue
            if line is _END:
                self._emit(self._lines.flush(self._clock(), end=True))
                return
            self._emit(self._lines.feed(line, self._clock()))

    def _emit(self, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, HandshakeFailure):
                self._report(output)
            else:
                self.real.write(output.text)
        if outputs:
            self.real.flush()

    def _report(self, failure: HandshakeFailure) -> None:
        self.failures[failure.reason] += 1
        self.on_failure(failure)
        # a connection closed mid-handshake is what a TCP health check does: not worth a warning
        level = logging.INFO if failure.reason == "closed" else logging.WARNING
        log.log(level, "tls handshake failed from %s: %s (%s)", failure.peer or "an unknown peer", failure.reason,
                failure.detail, extra={"event": "tls_handshake_failed", "peer": failure.peer,
                                       "reason": failure.reason, "detail": failure.detail})
