"""Load in the consumer protocol, end to end on a real coordinator over loopback gRPC: the workers' load
reports reach the coordinator's sample sink, and a load snapshot laid out as the statistics job writes it,
picked up as ``serve --snapshots`` picks it up (``SnapshotWatcher``), moves tasks off the overloaded member
at the shedder's interval, with the assignor on the coordinator and on the elected leader worker.

The assignor is Pulsar's OverloadShedder (``pulsar-overload``) with a 0.3 s shedding interval, registered
under a name of its own in this process (the coordinator's registry, and the workers' lookup).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.pulsar import LoadBalancerConfig, PulsarOverloadAssignor
from groupcoord.assignors.registry import register
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.consumer_load import LoadRechecks
from groupcoord.coordinator.process.snapshot_watch import SnapshotWatcher
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.loadstats.job import TASK_COLUMNS, WORKER_COLUMNS
from groupcoord.loadstats.session import _swap_into_place
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.states import WorkerState
from tests.worker.member_drivers import DRIVERS, Driven
from tests.worker.test_consumer_leader_grpc import Log, Recorder

G = "g"
TASKS = [f"t{i:02d}" for i in range(12)]
SHEDDER = "test-overload-shed"
INTERVAL_S = 0.3


class QuickOverload(PulsarOverloadAssignor):
    name = SHEDDER


@pytest.fixture(scope="module", autouse=True)
def shedder() -> None:
    register(QuickOverload(LoadBalancerConfig(load_balancer_shedding_interval_minutes=INTERVAL_S / 60)), replace=True)


class Reports:
    """The coordinator's sample sink: who reported (the sample log in ``serve``)."""

    def __init__(self) -> None:
        self.members: dict[str, int] = {}

    def __call__(self, group_id: str, member_id: str, report: pb.LoadReport) -> None:
        self.members[member_id] = self.members.get(member_id, 0) + 1


@pytest.fixture
def served() -> Iterator[tuple[ServerThread, Reports]]:
    reports = Reports()
    settings = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                                 consumer_heartbeat_interval_ms=100, consumer_assignment_interval_ms=20)
    runtime = CoordinatorRuntime(settings, on_load_report=reports, on_change=lambda group: group.validate())
    with ServerThread(runtime) as running:
        with AdminClient(running.address) as admin:
            admin.put_tasks(G, TASKS)
        yield running, reports


def report(client: object) -> pb.LoadReport:
    """Every tick's figures (the worker's reporter decides the cadence; this one always has news)."""
    return pb.LoadReport(ts_ms=int(time.time() * 1000), cpu=pb.ResourceUsage(usage=50.0, limit=100.0))


def write_snapshot(out: Path, snapshot_id: str, created_ms: int, owners: dict[str, str],
                   cpu: dict[str, float]) -> None:
    """A snapshot as the statistics job lays it out (Parquet tables, ``_meta.json``, the atomic swap)."""
    tmp = out.parent / f".tmp-{snapshot_id}"
    (tmp / "tasks").mkdir(parents=True)
    (tmp / "workers").mkdir()
    rate = 1000.0
    tasks = [{c: 0.0 for c in TASK_COLUMNS} | {
        "group_id": G, "task_id": task, "worker_id": worker, "short_samples": 10, "long_samples": 50,
        "short_msg_rate_in": rate, "short_msg_rate_out": rate, "long_msg_rate_in": rate, "long_msg_rate_out": rate,
        "short_msg_throughput_in": rate * 4096, "short_msg_throughput_out": rate * 4096,
        "long_msg_throughput_in": rate * 4096, "long_msg_throughput_out": rate * 4096,
        "topics": 1, "producers": 1, "consumers": 1, "split_candidate": False} for task, worker in owners.items()]
    workers = [{c: 0.0 for c in WORKER_COLUMNS} | {
        "group_id": G, "worker_id": worker, "num_tasks": sum(1 for w in owners.values() if w == worker),
        "cpu_usage": usage, "cpu_limit": 100.0, "ts_ms": created_ms} for worker, usage in cpu.items()]
    pq.write_table(pa.Table.from_pylist(tasks), tmp / "tasks" / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(workers), tmp / "workers" / "part-0.parquet")
    (tmp / "_meta.json").write_text(json.dumps({"snapshot_id": snapshot_id, "created_ms": created_ms}))
    _swap_into_place(str(tmp), str(out), snapshot_id)


def held(fleet: dict[str, Driven]) -> dict[str, set[TaskReplica]]:
    return {m.client.member_id: set(m.client.assigned_tasks) for m in fleet.values()}


def wait_until(what: object, predicate: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)  # polling with a deadline


def settled(fleet: dict[str, Driven]) -> bool:
    """Every task run once, by Stable members."""
    tasks = [t for m in fleet.values() for t in m.client.assigned_tasks]
    return sorted(t.task_id for t in tasks) == TASKS and all(
        m.client.state is WorkerState.STABLE for m in fleet.values())


@pytest.mark.parametrize("where", ["coordinator", "leader"])
def test_a_new_snapshot_sheds_off_the_overloaded_member_at_the_interval(
        where: str, served: tuple[ServerThread, Reports], tmp_path: Path) -> None:
    server, reports = served
    assignor = SHEDDER if where == "coordinator" else f"client:{SHEDDER}"
    log, fleet = Log(), {}
    model = server.runtime.model
    try:
        for name, driver in zip("abc", ["threaded", "asyncio", "threaded"], strict=True):
            config = WorkerConfig(group_id=G, coordinators=(server.address,), client_id=name, protocol="consumer",
                                  server_assignor=assignor, session_timeout_ms=3000, heartbeat_interval_ms=100,
                                  rebalance_timeout_ms=5000, retry_backoff_ms=20, retry_backoff_max_ms=200)
            fleet[name] = DRIVERS[driver](config, Recorder(log, name), load_reporter=report)
            fleet[name].start()
            assert fleet[name].wait(lambda c: c.state is WorkerState.STABLE, 20)
        wait_until(log.lines, lambda: settled(fleet))
        # the load reports travel in this protocol too: every member's, under its member id
        wait_until(reports.members, lambda: set(held(fleet)) <= set(reports.members))

        before = held(fleet)
        hot = max(before, key=lambda member: (len(before[member]), member))
        owners = {t.task_id: member for member, tasks in before.items() for t in tasks}
        epoch = server.call(lambda: model.consumer.groups[G].epoch)
        out = tmp_path / "snapshot"
        watcher = SnapshotWatcher(server.router, str(out))
        write_snapshot(out, "001-hot", 1_000, owners, {m: (95.0 if m == hot else 10.0) for m in before})
        snapshots = watcher.read()
        assert server.call(lambda: watcher.apply(snapshots)) == [G]

        # the shedder moves some of the hot member's tasks, and only those, to the others
        wait_until(log.lines, lambda: len(held(fleet)[hot]) < len(before[hot]) and settled(fleet))
        after = held(fleet)
        for member, tasks in before.items():
            if member != hot:
                assert tasks <= after[member], "a cool member lost a task"
        assert after[hot] < before[hot]
        assert server.call(lambda: model.consumer.groups[G].epoch) > epoch

        # a calm snapshot: checked at the interval; nothing moves (the coordinator's check says so and the
        # epoch stays; the leader's assignor, asked, moves nothing)
        epoch = server.call(lambda: model.consumer.groups[G].epoch)
        owners = {t.task_id: member for member, tasks in after.items() for t in tasks}
        write_snapshot(out, "002-calm", 2_000, owners, dict.fromkeys(after, 20.0))
        snapshots = watcher.read()
        assert server.call(lambda: watcher.apply(snapshots)) == [G]
        rechecks: LoadRechecks = model.rechecks
        group = model.consumer.groups[G]
        wait_until("the calm snapshot was not checked", lambda: server.call(
            lambda: rechecks.checked_on(G) == ("002-calm", 2_000) and not group.computing
            and group.target_epoch == group.epoch))
        if where == "coordinator":
            assert server.call(lambda: group.epoch) == epoch
        assert held(fleet) == after
    finally:
        for member in fleet.values():
            member.close()
    log.judge()
