"""Deadlines for waits on real processes that stretch with the machine's load.

A test's deadline on a JVM, an interpreter's imports or an election is a guard against a hang, not a
claim about speed: what it waits for needs CPU, and on a shared machine (six helpers on 2 cores here,
``make test-heavy``'s 4 xdist workers on CI's 2) it gets a share of it. A fixed deadline is a figure from
the machine it was written on (the Spark cluster test's 300 s per application, 134 s for the whole test at
load 3, ran out at load 25). So a deadline here is ``seconds`` of a quiet machine, multiplied by the
load per core *as the wait goes on* (the 1-minute load average lags a burst of tests that start
together, so a deadline read once at the start would not stretch), within ``[1, cap]``: a real hang still
fails, after at most ``cap`` times the quiet figure.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["Deadline", "keep_waiting", "load_factor", "run_within"]

T = TypeVar("T")

#: The most a deadline stretches: a hang costs at most this many times its quiet figure. 8 is CI's load per
#: core in a heavy run (load 16 on 2 cores); here, with six helpers, three sharded coordinators took 80 s
#: from their start to listening at load 50 (1.3 s of CPU each), and a 60 s deadline failed twice.
DEFAULT_CAP = 8.0


def load_factor(cap: float = DEFAULT_CAP) -> float:
    """The 1-minute load average per core, within ``[1, cap]``: how much slower than quiet a CPU-bound wait runs."""
    cores = os.cpu_count() or 1
    return min(cap, max(1.0, os.getloadavg()[0] / cores))


class Deadline:
    """``seconds`` on a quiet machine, stretched by the load seen at each check (never shrunk by a later lull)."""

    def __init__(self, seconds: float, cap: float = DEFAULT_CAP) -> None:
        self.seconds = seconds
        self.cap = cap
        self.began = time.monotonic()
        self._factor = load_factor(cap)

    @property
    def allowed(self) -> float:
        """The seconds allowed so far: the quiet figure times the highest load factor seen."""
        self._factor = max(self._factor, load_factor(self.cap))
        return self.seconds * self._factor

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def passed(self) -> bool:
        return self.elapsed() > self.allowed


def run_within(argv: Sequence[str], seconds: float, *, cap: float = DEFAULT_CAP, poll_s: float = 5.0,
               **popen: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True)`` with a :class:`Deadline` of ``seconds``:
    the child is killed (and ``TimeoutExpired`` raised, with what it printed) only once the stretched
    deadline has passed. ``stdout``/``stderr`` may be given (a file), as to ``Popen``."""
    deadline = Deadline(seconds, cap)
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    with subprocess.Popen(argv, text=True, **streams) as proc:
        while True:
            try:
                out, err = proc.communicate(timeout=poll_s)  # a retry after a timeout loses no output
            except subprocess.TimeoutExpired:
                if deadline.passed():
                    proc.kill()
                    out, err = proc.communicate()
                    raise subprocess.TimeoutExpired(argv, deadline.elapsed(), output=out, stderr=err) from None
                continue
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def keep_waiting(wait: Callable[[float], T], seconds: float, *, step_s: float = 10.0, cap: float = DEFAULT_CAP) -> T:
    """``wait(timeout)`` (a poll that raises ``TimeoutError``, such as ``AdminClient.wait_for``) given
    ``step_s`` at a time until it returns, its last ``TimeoutError`` raised once a :class:`Deadline` of
    ``seconds`` has passed."""
    deadline = Deadline(seconds, cap)
    while True:
        try:
            return wait(step_s)
        except TimeoutError:
            if deadline.passed():
                raise
