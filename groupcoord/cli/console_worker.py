"""``groupcoord worker``: the console consumer of this system, one JSON line per event.

Each line carries ``ts`` (wall-clock seconds), so the lines of many workers form an
ownership log: ``assigned`` starts the listed tasks (cooperative: only the new ones),
``revoked`` and ``lost`` stop them.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from groupcoord.assignors.registry import UnknownAssignorError, get_assignor
from groupcoord.cli.common import UsageError, resolve_group
from groupcoord.worker import WorkerClient, WorkerConfig
from groupcoord.worker.load import demo_load_reporter

__all__ = ["JsonLinesListener", "run_worker"]


class JsonLinesListener:
    """Prints the worker's events as JSON lines (``joined``, ``assigned``, ``revoked``, ``left``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: WorkerClient | None = None
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "worker": self.name, "ts": time.time(), **fields}) + "\n"
        with self._lock:
            # one write per line: workers sharing one O_APPEND file (an ownership log) never interleave
            # (print writes the text and its newline separately)
            sys.stdout.write(line)
            sys.stdout.flush()

    def on_joined(self, member_id: str, generation: int, is_leader: bool) -> None:
        self.emit("joined", member_id=member_id, generation=generation, leader=is_leader)

    def on_assigned(self, tasks: Sequence[Any], generation: int) -> None:
        self.emit("assigned", generation=generation, member_id=self.client.member_id if self.client else "",
                  tasks=[str(t) if t.replica else t.task_id for t in tasks])

    def on_revoked(self, tasks: Sequence[Any]) -> None:
        self.emit("revoked", tasks=[str(t) if t.replica else t.task_id for t in tasks])

    def on_lost(self, tasks: Sequence[Any]) -> None:
        self.emit("lost", tasks=[str(t) if t.replica else t.task_id for t in tasks])


def _config(args: argparse.Namespace) -> WorkerConfig:
    consumer = args.protocol == "consumer"
    try:
        config = WorkerConfig(
            group_id=resolve_group(args),
            coordinators=args.coordinator,
            client_id=args.name,
            protocol=args.protocol,
            server_assignor=args.server_assignor,  # the consumer protocol's: the coordinator checks the name
            assignors=tuple(a.strip() for a in args.assignor.split(",") if a.strip()),
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            rebalance_timeout_ms=args.rebalance_timeout_ms,
            rack=args.rack,
            pool=args.pool,
            capacity=args.capacity,
            instance_id=args.instance_id,
            rebalance_protocol=args.rebalance_protocol,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            token_file=args.token_file,
        )
        config.security.check(config.coordinators)
        for name in () if consumer else config.assignors:  # the consumer protocol assigns on the coordinator
            get_assignor(name)
        if consumer and config.server_assignor.startswith("client:"):  # ... or on the leader worker: this one
            get_assignor(config.server_assignor.removeprefix("client:"))
    except (ValueError, UnknownAssignorError) as error:
        raise UsageError(str(error)) from None
    return config


def run_worker(args: argparse.Namespace) -> int:
    """Run until SIGINT/SIGTERM (then revoke and leave) or a fatal error (exit 1)."""
    config = _config(args)
    listener = JsonLinesListener(args.name)
    reporter = demo_load_reporter(args.name) if args.report_load else None
    client = WorkerClient(config, listener, load_reporter=reporter)
    listener.client = client
    # The handler only appends to a list: a handler that takes a lock (Event.set) can deadlock with
    # the main thread interrupted inside Event.wait holding that same lock (a second SIGTERM did).
    signals: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    client.start()
    while not signals and client.fatal_error is None:
        time.sleep(0.2)
    member_id = client.member_id  # close() forgets it
    client.close(leave_group=True if args.leave_on_exit else None)
    listener.emit("left", member_id=member_id)
    if client.fatal_error is not None:
        print(f"groupcoord worker: {client.fatal_error}", file=sys.stderr)
        return 1
    return 0
