"""A rolling upgrade over a real gRPC server: stock classic workers (``WorkerClient``, default
protocol) form a group, a raw ``GroupHeartbeat`` client converts it by joining, everybody runs its
share, the raw client leaves and the group is classic again. Every start and stop of a task goes
to one ownership log, judged by the chaos suite's checker: no task on two members at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import grpc
import pytest

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker.client import WorkerClient
from groupcoord.worker.config import WorkerConfig
from tests.chaos.ownership import OwnershipLog, check, event
from tests.zookeeper_server import wait_until

G = "g"
TASKS = [f"t{i}" for i in range(6)]
SESSION_MS = 6_000


class Log:
    """The ownership log, in memory (one line per event, wall-clock seconds)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def write(self, what: str, worker: str, tasks: Sequence[TaskReplica | tuple[str, int]]) -> None:
        with self.lock:
            self.lines.append(event(what, time.time(), worker=f"{G}/{worker}", tasks=[f"{t[0]}#{t[1]}" for t in tasks]))


class Recorder:
    """A classic worker's listener: what it runs, and the log."""

    def __init__(self, log: Log, name: str) -> None:
        self.log, self.name = log, name
        self.running: set[tuple[str, int]] = set()

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.running |= {(t.task_id, t.replica) for t in tasks}
        self.log.write("assigned", self.name, tasks)

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.running -= {(t.task_id, t.replica) for t in tasks}
        self.log.write("revoked", self.name, tasks)

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self.running -= {(t.task_id, t.replica) for t in tasks}
        self.log.write("lost", self.name, tasks)


class RawMember:
    """A consumer-protocol member on raw stubs: runs what it was last given, reports it, logs it."""

    def __init__(self, stub: pb_grpc.GroupCoordinatorStub, log: Log) -> None:
        self.stub, self.log = stub, log
        self.member_id, self.epoch, self.refused = "", 0, ""
        self.running: set[tuple[str, int]] = set()

    def _apply(self, answer: pb.GroupHeartbeatResponse) -> pb.GroupHeartbeatResponse:
        assert answer.error.code == pb.NONE, answer.error
        self.member_id, self.epoch = answer.member_id, answer.member_epoch
        if answer.HasField("assignment"):
            given = {(t.task_id, t.replica) for t in answer.assignment.tasks}
            stopped, started = self.running - given, given - self.running
            if stopped:
                self.log.write("revoked", "raw", sorted(stopped))
            if started:
                self.log.write("assigned", "raw", sorted(started))
            self.running = given
        return answer

    def join(self) -> bool:
        """One join; False when the classic group is not Stable yet (REBALANCE_IN_PROGRESS: retry)."""
        answer = self.stub.GroupHeartbeat(pb.GroupHeartbeatRequest(
            group_id=G, member_epoch=0, client_id="raw", session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=SESSION_MS), timeout=10)
        if answer.error.code == pb.REBALANCE_IN_PROGRESS:
            self.refused = answer.error.message
            return False
        self._apply(answer)
        return True

    def beat(self) -> pb.GroupHeartbeatResponse:
        request = pb.GroupHeartbeatRequest(group_id=G, member_id=self.member_id, member_epoch=self.epoch)
        request.owned.SetInParent()
        request.owned.tasks.extend(pb.TaskReplica(task_id=t, replica=r) for t, r in sorted(self.running))
        return self._apply(self.stub.GroupHeartbeat(request, timeout=10))

    def leave(self) -> None:
        answer = self.stub.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id=G, member_id=self.member_id,
                                                                   member_epoch=-1), timeout=10)
        assert answer.error.code == pb.NONE, answer.error
        if self.running:
            self.log.write("revoked", "raw", sorted(self.running))
        self.running = set()


@pytest.fixture
def server() -> Iterator[ServerThread]:
    runtime = CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0),
                                 on_change=lambda group: group.validate())
    with ServerThread(runtime) as thread:
        yield thread


@pytest.mark.parametrize("rebalance_protocol", ["eager", "cooperative"])
def test_stock_classic_workers_keep_working_through_an_upgrade_and_back(server: ServerThread,
                                                                        rebalance_protocol: str) -> None:
    log = Log()
    with grpc.insecure_channel(server.address) as channel:
        admin, stub = pb_grpc.GroupAdminStub(channel), pb_grpc.GroupCoordinatorStub(channel)
        admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=t) for t in TASKS]), timeout=10)
        recorders = [Recorder(log, f"w{i}#0") for i in range(2)]
        workers = [WorkerClient(WorkerConfig(
            group_id=G, coordinators=(server.address,), client_id=f"w{i}", session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=200, rebalance_protocol=rebalance_protocol, retry_backoff_max_ms=300),
            recorders[i]).start() for i in range(2)]
        catalog = {(t, 0) for t in TASKS}
        raw = RawMember(stub, log)
        try:
            wait_until(lambda: [len(r.running) for r in recorders] == [3, 3], 60, "the classic group")
            try:
                wait_until(raw.join, 60, "the classic group Stable, to convert")
            except AssertionError as failure:
                raise AssertionError(f"{failure}: {raw.refused}; workers run {[r.running for r in recorders]}") from None
            assert server.call(lambda: server.runtime.model.consumer.groups[G].classic_members) == 2

            def shared() -> bool:
                raw.beat()
                time.sleep(0.1)
                return sorted(len(r.running) for r in [*recorders, raw]) == [2, 2, 2]  # type: ignore[list-item]
            wait_until(shared, 60, "three members with two tasks each")

            raw.leave()
            assert server.call(lambda: G not in server.runtime.model.consumer.groups)
            wait_until(lambda: set().union(*(r.running for r in recorders)) == catalog
                       and server.call(lambda: server.runtime.model.groups[G].state.value) == "Stable",
                       60, "the classic group again")
        finally:
            for worker in workers:
                worker.close()
    report = check(OwnershipLog.parse(log.lines), session_s=SESSION_MS / 1000, rebalance_timeout_s=60,
                   heartbeat_s=0.2)
    assert not report.overlaps, [str(o) for o in report.overlaps]
    assert len(log.lines) > 4
