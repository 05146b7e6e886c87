"""Where a child process listens, read from the line it prints once it has bound its port.

Why: a test that picks a free port (bind 0, read it, close it) and hands it to a child races every other
bind and outgoing connection on the machine until the child binds it. ``groupcoord serve`` takes port 0
(``--listen 127.0.0.1:0``, ``metrics_listen = "127.0.0.1:0"``) and says on stderr which port it bound
(docs/cli.md): ``groupcoord coordinator listening on HOST:PORT (...)`` and ``groupcoord metrics on
http://HOST:PORT/metrics``. The kernel then holds the port for the child from the bind on: no race.

    proc = subprocess.Popen([..., "serve", "--listen", "127.0.0.1:0", ...], stderr=open(log, "w"))
    address = announced(log, proc)            # "127.0.0.1:41234"
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.deadlines import Deadline

__all__ = ["FOLLOW_METRICS_LINE", "METRICS_LINE", "SERVE_LINE", "announced"]

#: ``groupcoord serve``'s line once its gRPC port is bound (with ``--advertise`` in a ZooKeeper mode: the
#: advertised address, which is what the other processes dial).
SERVE_LINE = re.compile(r"^groupcoord coordinator listening on (\S+)", re.MULTILINE)
#: ``groupcoord serve``'s line once its metrics endpoint is bound.
METRICS_LINE = re.compile(r"^groupcoord metrics on https?://(\S+)/metrics", re.MULTILINE)
#: ``groupcoord stats --follow --metrics-listen``'s start line on stdout, naming the bound metrics endpoint.
FOLLOW_METRICS_LINE = re.compile(r"^groupcoord stats: following .*, metrics on https?://(\S+)/metrics", re.MULTILINE)


def announced(log: Path, proc: subprocess.Popen[str] | subprocess.Popen[bytes], line: re.Pattern[str] = SERVE_LINE,
              seconds: float = 60.0) -> str:
    """The ``HOST:PORT`` in the first match of ``line`` in ``log`` (the child's stderr, written as it runs).

    Waits a process start: bounded by the machine, not the product, so ``seconds`` stretches with the load
    (tests/deadlines.py). Fails at once, with the end of the log, if the child exits first."""
    deadline = Deadline(seconds)
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if found := line.search(text):
            return found.group(1)
        if proc.poll() is not None:
            raise AssertionError(f"the process exited ({proc.returncode}) before listening; {log} ends:\n{text[-2000:]}")
        if deadline.passed():
            raise AssertionError(f"no {line.pattern!r} in {log} after {deadline.elapsed():.0f}s; it ends:\n{text[-2000:]}")
        time.sleep(0.05)  # polling a file with a deadline
