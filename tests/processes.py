"""Ending the child processes a test started, whatever state the test left them in."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.deadlines import Deadline


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


_PREWARMED = """\
import sys, pathlib
from groupcoord.cli.main import main
for name in sys.argv[2:]:
    __import__(name)
pathlib.Path(sys.argv[1]).touch()
if sys.stdin.readline() == "go\\n":
    sys.argv[0] = "groupcoord"
    sys.exit(main([line.rstrip("\\n") for line in sys.stdin]))
"""


class Prewarmed:
    """A ``groupcoord`` command in a process that has done its imports and waits for ``go()``.

    Why: on a loaded machine a Python process spends most of its start importing (``groupcoord worker
    --help`` took 25 s at load 56), so a test about a restart shorter than a session (a static member,
    a coordinator outage) measured the machine's imports, not the product. Start the replacement
    ``prewarmed`` before the restart, wait for ``ready()``, stop the old process, then ``go()``: the
    outage is the command's own start-up. The command runs ``groupcoord.cli.main.main`` as
    ``python -m groupcoord.cli`` does.
    """

    def __init__(self, argv: Sequence[str], marker: Path, *, env: dict[str, str], preload: Sequence[str] = (),
                 **popen: Any) -> None:
        self.argv = list(argv)
        self.marker = marker
        marker.unlink(missing_ok=True)
        self.proc: subprocess.Popen[str] = subprocess.Popen(
            [sys.executable, "-c", _PREWARMED, str(marker), *preload], stdin=subprocess.PIPE, text=True, env=env,
            **popen)

    def ready(self, timeout: float = 180.0) -> None:
        """Wait for the imports (a process start: bounded by the machine, not the product, so ``timeout``
        stretches with the load: tests/deadlines.py)."""
        deadline = Deadline(timeout)
        while not self.marker.exists():
            assert self.proc.poll() is None, f"the prewarmed process exited ({self.proc.returncode})"
            assert not deadline.passed(), f"the prewarmed process did not import within {deadline.elapsed():.0f}s"
            time.sleep(0.05)  # polling with a deadline

    def go(self) -> subprocess.Popen[str]:
        """Run the command now; returns its process."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n" + "".join(f"{arg}\n" for arg in self.argv))
        self.proc.stdin.close()
        return self.proc
