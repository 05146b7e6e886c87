"""One OS process holding many ``WorkerClient`` members (of many groups): a scale test's worker fleet.

    python -m tests.chaos.member_host --coordinator a:1,b:2,c:3 --host h0 \\
        --groups g0,g1,g2 --session-timeout-ms 10000 --heartbeat-interval-ms 1000 >> ownership.log

Each member is a real ``WorkerClient`` (its own thread and channel) named ``GROUP/HOST#1`` and writes
the ``groupcoord worker`` JSON lines (``joined``, ``assigned``, ``revoked``, ``lost``) to stdout, each
line with one ``os.write`` so many members, and many such processes, share one ``O_APPEND`` ownership
log (``tests/chaos/ownership.py``). SIGTERM closes every member (revoke, leave) and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from groupcoord.cli.console_worker import JsonLinesListener
from groupcoord.worker import WorkerClient, WorkerConfig

__all__ = ["main"]


class SharedLogListener(JsonLinesListener):
    """``groupcoord worker``'s lines, written with one ``os.write`` each (many members share stdout)."""

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "worker": self.name, "ts": time.time(), **fields}) + "\n"
        os.write(sys.stdout.fileno(), line.encode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--coordinator", required=True, help="every coordinator address, comma-separated")
    parser.add_argument("--host", required=True, help="this process's name (the members' slot)")
    parser.add_argument("--groups", required=True, help="one member per group named here, comma-separated")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    parser.add_argument("--rebalance-timeout-ms", type=int, default=10_000)
    parser.add_argument("--rebalance-protocol", default="eager")
    args = parser.parse_args(argv)
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    clients: list[WorkerClient] = []
    for group in args.groups.split(","):
        listener = SharedLogListener(f"{group}/{args.host}#1")
        client = WorkerClient(WorkerConfig(
            group_id=group, coordinators=args.coordinator, client_id=listener.name,
            session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=args.heartbeat_interval_ms,
            rebalance_timeout_ms=args.rebalance_timeout_ms, rebalance_protocol=args.rebalance_protocol,
            assignors=("sticky", "round-robin")), listener)
        listener.client = client
        clients.append(client.start())
    while not stop:
        time.sleep(0.2)
    closers = [threading.Thread(target=c.close, kwargs={"leave_group": True}) for c in clients]
    for closer in closers:
        closer.start()
    for closer in closers:
        closer.join(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
