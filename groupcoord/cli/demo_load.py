"""Act two of ``groupcoord demo``: load reports → Spark job → snapshot → Pulsar assignors.

One group per Pulsar assignor, three in-process workers each, reporting load
every heartbeat (policy interval shortened for the demo). The Spark job runs on
local Spark over the coordinator's sample log, its snapshot is published, and
each group rebalances: the leader's assignor is shown to receive the snapshot.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assignors.base import RebalanceCheck
from assignors.registry import get_assignor
from groupcoord.admin import AdminClient
from groupcoord.cli.narrate import DemoFailed, say, show_group, stable, subprocess_env, wait_for_group
from loadstats.report_policy import ReportPolicy
from loadstats.sample_log import SampleLog
from worker import WorkerClient, WorkerConfig
from worker.load import demo_load_reporter

__all__ = ["PULSAR_ASSIGNORS", "act_two"]

PULSAR_ASSIGNORS = ("pulsar-threshold", "pulsar-uniform", "pulsar-avg", "pulsar-overload")
TASKS_PER_GROUP = 12


class _Quiet:
    def on_assigned(self, tasks: Sequence[Any], generation: int) -> None:
        pass

    def on_revoked(self, tasks: Sequence[Any]) -> None:
        pass


class _Watched:
    """Wraps an assignor to tell the demo what context the leader ran it with."""

    def __init__(self, inner: Any, seen: dict[str, Any], lock: threading.Lock) -> None:
        self.inner = inner
        self.name = inner.name
        self._seen = seen
        self._lock = lock

    @property
    def recheck_interval_s(self) -> float:
        # written out, not forwarded by __getattr__: from Python 3.12 isinstance() against a
        # runtime-checkable Protocol (RebalanceCheck) ignores __getattr__
        return float(getattr(self.inner, "recheck_interval_s", 0.0))

    def needs_rebalance(self, context: Any) -> bool:
        return isinstance(self.inner, RebalanceCheck) and self.inner.needs_rebalance(context)

    def assign(self, context: Any) -> Any:
        result = self.inner.assign(context)
        with self._lock:
            self._seen[context.group_id] = context.load_snapshot
        return result


def act_two(address: str, admin: AdminClient, root: Path, samples: SampleLog) -> None:
    """Pulsar-assignor groups report load, the stats job publishes a snapshot, each group rebalances with it."""
    seen: dict[str, Any] = {}
    lock = threading.Lock()
    groups = [f"demo-{name}" for name in PULSAR_ASSIGNORS]
    say("act two: load-aware assignment. One group per Pulsar assignor, 3 workers each, "
        "reporting load (psutil + per-task rates) to the coordinator's sample log")
    clients = []
    for group, assignor in zip(groups, PULSAR_ASSIGNORS):
        admin.put_tasks(group, [f"bundle-{i:02d}" for i in range(TASKS_PER_GROUP)])
        for i in range(3):
            config = WorkerConfig(group_id=group, coordinators=(address,), client_id=f"{assignor}-w{i}",
                                  assignors=(assignor,), session_timeout_ms=5000, heartbeat_interval_ms=200,
                                  rebalance_timeout_ms=10_000)
            reporter = demo_load_reporter(config.client_id, policy=ReportPolicy(max_interval_s=0.3))
            clients.append(WorkerClient(config, _Quiet(), load_reporter=reporter,
                                        assignor_lookup=lambda name: _Watched(get_assignor(name), seen, lock)))
    try:
        for client in clients:
            client.start()
        for group in groups:
            wait_for_group(admin, group, stable(3, TASKS_PER_GROUP), f"group {group} forms")
        say("every group is Stable without a snapshot (the Pulsar assignors fall back to sticky round-robin); "
            "collecting load samples for 3 s")
        time.sleep(3)  # the demo lets reports accumulate; tests never order events by sleeping
        samples.flush()
        stats = samples.stats()
        say(f"sample log: {stats.rows_written} rows written under {root / 'samples'}; running the Spark job "
            "(`groupcoord stats`, local Spark)")
        out = Path(tempfile.mkdtemp(prefix="snapshot-", dir=root))
        command = [sys.executable, "-m", "groupcoord.cli", "stats", "--samples", str(root / "samples"),
                   "--out", str(out), "--master", "local[2]", "--coordinator", address]
        print(f"   $ groupcoord stats --samples {root / 'samples'} --out {out} --master local[2] "
              f"--coordinator {address}", flush=True)
        job = subprocess.run(command, check=False, capture_output=True, text=True, env=subprocess_env(), timeout=600)
        for line in job.stdout.splitlines():
            print(f"   {line}", flush=True)
        if job.returncode != 0:
            raise DemoFailed(f"the stats job failed: {job.stderr.strip().splitlines()[-1:]}")
        missing = [g for g in groups if g not in job.stdout]
        if missing:
            raise DemoFailed(f"no snapshot published for {missing}")
        say("snapshot published; adding one task per group so each rebalances with it")
        for group in groups:
            admin.put_tasks(group, ["bundle-new"])
        for group in groups:
            wait_for_group(admin, group, stable(3, TASKS_PER_GROUP + 1), f"group {group} rebalances with the snapshot")
        for group, assignor in zip(groups, PULSAR_ASSIGNORS):
            with lock:
                snapshot = seen.get(group)
            if snapshot is None:
                raise DemoFailed(f"the leader of {group} ran {assignor} without the snapshot")
            say(f"{group}: leader ran {assignor} with snapshot {snapshot.snapshot_id} "
                f"({len(snapshot.tasks)} tasks, {len(snapshot.workers)} workers)")
            show_group(admin, group)
    finally:
        for client in clients:
            client.close()
