"""Act two of ``groupcoord demo``: load reports → Spark job → snapshot → Pulsar assignors.

One group per Pulsar assignor, three in-process workers each, reporting load
every heartbeat (policy interval shortened for the demo). The Spark job runs on
local Spark over the coordinator's sample log, its snapshot is published, and
each group rebalances: the leader's assignor is shown to receive the snapshot.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assignors.base import RebalanceCheck
from assignors.registry import get_assignor
from groupcoord.admin import AdminClient
from groupcoord.cli.narrate import DemoFailed, say, show_group, stable, wait_for_group
from groupcoord.cli.stats import publish_snapshots
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


class _Refresher:
    """The statistics job in this process, on one warm Spark session: the first refresh folds in the
    whole log (and starts the JVM); the next read only the sample files they have not seen."""

    def __init__(self, root: Path, address: str) -> None:
        # lazy: PySpark is the stats extra; the demo runs act one without it
        from loadstats.job import build_session

        self.samples = str(root / "samples")
        self.out = str(Path(tempfile.mkdtemp(prefix="snapshot-", dir=root)))
        self.address = address
        started = time.monotonic()
        self.spark = build_session("local[2]", driver_memory="1g")
        print(f"   local Spark session started in {time.monotonic() - started:.1f}s (once for both refreshes)", flush=True)

    def refresh(self, label: str) -> list[str]:
        """Fold in what is new, write the snapshot, publish it; returns the groups it reached."""
        from loadstats.stream import run_incremental  # lazy: PySpark (the stats extra)

        print(f"   $ groupcoord stats --samples {self.samples} --out {self.out} --coordinator {self.address}"
              f"   ({label})", flush=True)
        result = run_incremental(self.samples, self.out, spark=self.spark, master=None)
        sent = publish_snapshots(self.out, self.address)
        extra = result.extra
        print(f"   {extra.get('rows_new', 0)} new sample row(s) folded into the state, {result.tasks} task(s), "
              f"{result.workers} worker(s) in {result.wall_time_s:.1f}s; published to {len(sent)} group(s)", flush=True)
        return sent

    def close(self) -> None:
        self.spark.stop()


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
    refresher: _Refresher | None = None
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
        refresher = _Refresher(root, address)
        first = refresher.refresh("first run: the whole log")
        missing = [g for g in groups if g not in first]
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
        say("more load for 2 s, then a second refresh on the same (now warm) Spark session: it reads only the "
            "sample files it has not seen, the state beside the snapshot carrying the averages")
        time.sleep(2)  # the demo lets reports accumulate; tests never order events by sleeping
        samples.flush()
        refresher.refresh("again, warm: only what is new")
    finally:
        for client in clients:
            client.close()
        if refresher is not None:
            refresher.close()
