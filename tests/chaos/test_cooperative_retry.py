"""Found by the chaos run (zookeeper, seed 1): a cooperative worker that cannot reach the coordinator
while it re-joins kept running its tasks through every backoff (up to 10 s each), long after the
coordinator had removed it and handed them to another member: 17 s of one task on two workers.

A cooperative worker keeps its tasks through a re-join only while its membership can still be
alive: no longer than a session timeout after the coordinator last answered it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.worker import WorkerClient, WorkerConfig
from tests.chaos.proxy import FaultProxy

G = "coop-retry"
SESSION_MS = 1_000


class Running:
    """What one worker runs, and when each task stopped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: set[str] = set()
        self.stopped_at: dict[str, float] = {}
        self.started_at: dict[str, float] = {}

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        with self.lock:
            self.tasks |= {t.task_id for t in tasks}
            self.started_at.update({t.task_id: time.monotonic() for t in tasks})

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.on_lost(tasks)

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            for t in tasks:
                self.tasks.discard(t.task_id)
                self.stopped_at[t.task_id] = time.monotonic()


def config(name: str, address: str) -> WorkerConfig:
    return WorkerConfig(group_id=G, coordinators=address, client_id=name, rebalance_protocol="cooperative",
                        assignors=("sticky",), session_timeout_ms=SESSION_MS, heartbeat_interval_ms=100,
                        rebalance_timeout_ms=1_000)


def test_a_cooperative_worker_cut_off_while_rejoining_stops_within_its_session(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["t0", "t1", "t2", "t3"])
    a, b = Running(), Running()
    with FaultProxy(server.port) as proxy:
        cut_off = WorkerClient(config("a", proxy.address), a).start()
        try:
            assert cut_off.wait_until(lambda w: len(w.assigned_tasks) == 4, 30)
            proxy.drop()  # every connection closed, new ones too: each join attempt fails at once
            cut_off.request_rebalance()  # re-join (cooperative: tasks run on through it), and fail, and back off
            began = time.monotonic()
            with WorkerClient(config("b", server.address), b):
                deadline = time.monotonic() + 20
                while b.tasks != {"t0", "t1", "t2", "t3"} and time.monotonic() < deadline:
                    time.sleep(0.05)  # polling with a deadline
                assert b.tasks == {"t0", "t1", "t2", "t3"}, "the coordinator expired a and gave b its tasks"
                with a.lock, b.lock:
                    still = set(a.tasks)
                    stopped = dict(a.stopped_at)
                    started = dict(b.started_at)
                assert not still, f"a still runs {sorted(still)} {max(started.values()) - began:.1f}s after it was cut off"
                assert all(stopped[t] <= started[t] for t in started), "a stopped each task before b started it"
        finally:
            cut_off.close(timeout=5)
    admin.close()
