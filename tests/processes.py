"""Ending the child processes a test started, whatever state the test left them in."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterable


def stop_processes(procs: Iterable[subprocess.Popen[str]], grace_s: float = 15.0) -> None:
    """SIGTERM every live process (continuing a SIGSTOPped one first, or it could not exit), wait up
    to ``grace_s`` each, then SIGKILL what is left."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
