"""Worker clients against a real coordinator on a loopback port."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import TimerKey
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.storage.store import MemoryStore
from groupcoord.coordinator.testing import FailingStore, FakeOffice
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState

G = "orders"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int, tuple[str, ...]]] = []
        self.lock = threading.Lock()

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        with self.lock:
            self.events.append(("assigned", generation, tuple(str(t) for t in tasks)))

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            self.events.append(("revoked", -1, tuple(str(t) for t in tasks)))


def make_worker(address: str, name: str, listener: object | None = None, **overrides: object) -> WorkerClient:
    settings: dict[str, object] = {
        "group_id": G, "coordinators": address, "client_id": name, "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000, "retry_backoff_ms": 20, "retry_backoff_max_ms": 200,
    }
    settings.update(overrides)
    return WorkerClient(WorkerConfig(**settings), listener or Recorder())  # type: ignore[arg-type]


def settled(workers: list[WorkerClient], generation_at_least: int = 1) -> bool:
    generations = {w.generation for w in workers}
    return (
        all(w.state is WorkerState.STABLE for w in workers)
        and len(generations) == 1
        and min(generations) >= generation_at_least
    )


def wait_settled(workers: list[WorkerClient], admin: AdminClient, tasks: int, timeout: float = 20) -> pb.DescribeGroupResponse:
    def done(d: pb.DescribeGroupResponse) -> bool:
        return (
            d.state == pb.STABLE
            and len(d.members) == len(workers)
            and sum(len(m.assigned) for m in d.members) == tasks
            and all(w.state is WorkerState.STABLE and w.generation == d.generation for w in workers)
        )

    return admin.wait_for(G, done, timeout)


def test_group_forms_rebalances_on_join_and_leave(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(6)])
    workers = [make_worker(server.address, f"w{i}").start() for i in range(2)]
    try:
        described = wait_settled(workers, admin, 6)
        owned = sorted(str(t) for w in workers for t in w.assigned_tasks)
        assert owned == sorted(f"t{i}#0" for i in range(6))
        assert {len(w.assigned_tasks) for w in workers} == {3}
        assert described.protocol == "round-robin"
        assert described.leader_id in {w.member_id for w in workers}

        third = make_worker(server.address, "w2").start()
        workers.append(third)
        described = wait_settled(workers, admin, 6)
        assert {len(w.assigned_tasks) for w in workers} == {2}

        leaving = workers.pop(0)
        leaving.close()
        assert leaving.state is WorkerState.DOWN and leaving.assigned_tasks == ()
        described = wait_settled(workers, admin, 6)
        assert leaving.member_id == "" and len(described.members) == 2
    finally:
        for w in workers:
            w.close()
        admin.close()


def test_task_catalog_edit_reaches_the_workers(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])
    recorder = Recorder()
    worker = make_worker(server.address, "solo", recorder).start()
    try:
        wait_settled([worker], admin, 1)
        admin.put_tasks(G, ["b", "c"], replicas=1)
        wait_settled([worker], admin, 3)
        assert sorted(t.task_id for t in worker.assigned_tasks) == ["a", "b", "c"]
        admin.delete_tasks(G, ["a"])
        wait_settled([worker], admin, 2)
        assert sorted(t.task_id for t in worker.assigned_tasks) == ["b", "c"]
        # eager protocol: every re-join revoked everything first
        kinds = [kind for kind, _, _ in recorder.events]
        assert kinds[:3] == ["assigned", "revoked", "assigned"]
    finally:
        worker.close()
        admin.close()


class Exploding:
    def __init__(self) -> None:
        self.calls = 0

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.calls += 1
        raise RuntimeError("the service's own bug")

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        raise RuntimeError("another bug")


def test_a_listener_that_raises_does_not_break_the_loop(server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])
    listener = Exploding()
    worker = make_worker(server.address, "fragile", listener).start()
    try:
        wait_settled([worker], admin, 1)
        admin.put_tasks(G, ["b"])
        wait_settled([worker], admin, 2)
        assert listener.calls >= 2 and worker.fatal_error is None
        assert "listener on_assigned raised" in caplog.text
    finally:
        worker.close()
        admin.close()


def test_worker_keeps_retrying_an_unreachable_coordinator_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="groupcoord.worker")
    with ServerThread() as probe:
        dead_address = probe.address  # a port that was just freed: nothing answers there
    retries = threading.Event()
    backing_off_in: list[WorkerState] = []

    def sleep(seconds: float) -> None:  # no real waiting: count the backoffs, note the state they show
        if seconds > 0:
            backing_off_in.append(worker.state)
            retries.set()

    worker = WorkerClient(
        WorkerConfig(group_id=G, coordinators=dead_address, session_timeout_ms=3000, heartbeat_interval_ms=100,
                     request_timeout_ms=500, retry_backoff_ms=10, retry_backoff_max_ms=20),
        Recorder(), sleep=sleep,
    )
    worker.start()
    try:
        assert retries.wait(10)
        assert set(backing_off_in) == {WorkerState.PREPARING_JOIN}  # not Joining: no JoinGroup is in flight
        assert worker.fatal_error is None
    finally:
        worker.close()
    assert "retrying in" in caplog.text and dead_address in caplog.text


def test_worker_follows_not_coordinator_to_the_active_one() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    with ServerThread(CoordinatorRuntime(config)) as active, \
            ServerThread(CoordinatorRuntime(config, office=FakeOffice(in_office=False))) as standby:
        standby.call(lambda: standby.runtime.office.change(address=active.address))  # type: ignore[attr-defined]
        worker = make_worker(f"{standby.address}", "follower", rebalance_timeout_ms=1000).start()
        admin = AdminClient(f"{standby.address},{active.address}")
        try:
            admin.put_tasks(G, ["x"])
            assert worker.wait_until(lambda w: w.state is WorkerState.STABLE and bool(w.assigned_tasks), 20)
            assert worker.coordinator_address == active.address
        finally:
            worker.close()
            admin.close()


def test_a_worker_leaves_a_hung_coordinator_within_its_session() -> None:
    """The active hangs (its loop is stuck, as under SIGSTOP) and a standby takes over from the same store.
    Heartbeats give up after half the session instead of the 30 s request timeout, so the worker reaches
    the new active while its session there is still alive: same generation, tasks never revoked."""
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    store = MemoryStore()
    release = threading.Event()
    office = FakeOffice(in_office=False)  # a standby, until it takes over below
    with ServerThread(CoordinatorRuntime(config, store=store)) as first, \
            ServerThread(CoordinatorRuntime(config, store=store, office=office)) as second:
        office.change(address=first.address)
        admin = AdminClient(first.address)
        admin.put_tasks(G, ["a", "b"])
        recorder = Recorder()
        # session 6 s: heartbeats to the hung active give up after 3 s, leaving 3 s to reach the new one
        # (with 3 s, the margin was 1.5 s, which a busy machine could use up)
        worker = make_worker(f"{first.address},{second.address}", "w", recorder, session_timeout_ms=6000).start()
        frozen = threading.Thread(target=lambda: first.call(lambda: release.wait(30), timeout=60))
        try:
            before = wait_settled([worker], admin, 2)
            frozen.start()
            hung_at = time.monotonic()

            office.change(in_office=True, address=second.address)  # elected: it loads the groups off its loop
            with AdminClient(second.address) as new_admin:
                # the member's session there started at the load: a fresh last_seen a second later is a heartbeat
                heard = new_admin.wait_for(G, lambda d: d.state == pb.STABLE and time.monotonic() - hung_at > 1
                                           and [m.last_seen_ms_ago < 300 for m in d.members] == [True], 10)
            assert heard.generation == before.generation
            assert worker.coordinator_address == second.address and worker.generation == before.generation
            assert worker.state is WorkerState.STABLE
            assert [kind for kind, _, _ in recorder.events] == ["assigned"]
        finally:
            release.set()
            frozen.join(30)
            worker.close()
            admin.close()


@pytest.mark.parametrize("in_office", [None, False])
def test_timers_fire_only_in_office(in_office: bool | None) -> None:
    fired: list[TimerKey] = []
    office = None if in_office is None else FakeOffice(in_office=True)
    runtime = CoordinatorRuntime(clock=FakeClock(), office=office)
    runtime.load()
    if office is not None:
        office.is_in_office = in_office  # voted out (e.g. after a long pause) before the server runs a timer
    key = TimerKey("session", "g", "m")
    runtime.timers.schedule(key, 0.0, fired.append)
    with ServerThread(runtime) as server:
        # the timer task ran its first round before this call reaches the loop
        state = server.call(lambda: (runtime.refusal() is None, len(runtime.timers)))
    if in_office is None:  # standalone: always in office
        assert fired == [key] and state == (True, 0)
    else:  # stood down instead of firing anything
        assert fired == [] and state == (False, 0)


def test_a_failed_store_write_leaves_the_group_as_stored(tmp_path: Path) -> None:
    store = FailingStore(SqliteStore(tmp_path / "groups.db"))
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    runtime = CoordinatorRuntime(config, store=store, on_change=lambda group: group.validate())
    with ServerThread(runtime) as server, grpc.insecure_channel(server.address) as channel:
        admin = AdminClient(server.address)
        admin.put_tasks(G, ["a", "b"])
        recorder = Recorder()
        worker = make_worker(server.address, "w", recorder).start()
        try:
            before = wait_settled([worker], admin, 2)
            store.fail_next_save()  # e.g. the disk is full
            put_c = pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="c", replicas=1)])
            refused = pb_grpc.GroupAdminStub(channel).PutTasks(put_c, timeout=5)
            assert refused.error.code == pb.COORDINATOR_NOT_AVAILABLE and store.failures == 1
            assert "disk is full" in refused.error.message
            after = admin.describe_group(G)  # as stored: no rebalance, no task c
            assert (after.state, after.generation) == (pb.STABLE, before.generation)
            assert [t.task_id for t in after.tasks] == ["a", "b"]
            assert [list(m.assigned) for m in after.members] == [list(m.assigned) for m in before.members]
            assert store.load_all()[G]["generation"] == before.generation
            assert worker.state is WorkerState.STABLE and [kind for kind, _, _ in recorder.events] == ["assigned"]
            # the fault has cleared: the same request goes through and the group rebalances onto it
            assert pb_grpc.GroupAdminStub(channel).PutTasks(put_c, timeout=5).num_tasks == 3
            assert wait_settled([worker], admin, 3).generation == before.generation + 1
        finally:
            worker.close()
            admin.close()
    store.close()


def test_health_and_reflection(server: ServerThread) -> None:
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "groupcoord.v1.GroupCoordinator", "groupcoord.v1.GroupAdmin"):
            status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in responses for s in r.list_services_response.service}
        assert {"groupcoord.v1.GroupCoordinator", "groupcoord.v1.GroupAdmin"} <= names


def test_bad_requests_over_the_wire_get_codes_not_crashes(server: ServerThread) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        assert stub.JoinGroup(pb.JoinGroupRequest(group_id=""), timeout=5).error.code == pb.INVALID_GROUP_ID
        response = stub.JoinGroup(pb.JoinGroupRequest(group_id="g", session_timeout_ms=5), timeout=5)
        assert response.error.code == pb.INVALID_SESSION_TIMEOUT
        assert stub.Heartbeat(pb.HeartbeatRequest(group_id="g", member_id="x"), timeout=5).error.code == \
            pb.UNKNOWN_MEMBER_ID
        sync = stub.SyncGroup(pb.SyncGroupRequest(group_id="nope", member_id="x"), timeout=5)
        assert sync.error.code == pb.UNKNOWN_MEMBER_ID
        # bytes that are not a JoinGroupRequest: refused by the server, which keeps serving
        raw = channel.unary_unary("/groupcoord.v1.GroupCoordinator/JoinGroup")
        with pytest.raises(grpc.RpcError) as refused:
            raw(b"\xff\xff\xff\xff", timeout=5)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid groupcoord.v1.JoinGroupRequest" in refused.value.details()
        assert stub.Heartbeat(pb.HeartbeatRequest(group_id="g", member_id="x"), timeout=5).error.code == \
            pb.UNKNOWN_MEMBER_ID


class RecheckingAssignor:
    """Round-robin that asks for one rebalance when it sees the published snapshot."""

    name = "test-recheck"
    recheck_interval_s = 0.05

    def __init__(self) -> None:
        from groupcoord.assignors.round_robin import RoundRobinAssignor

        self.inner = RoundRobinAssignor()
        self.checked_with: list[object] = []
        self.fired = False

    def assign(self, context: object) -> object:
        return self.inner.assign(context)  # type: ignore[arg-type]

    def needs_rebalance(self, context: object) -> bool:
        snapshot = getattr(context, "load_snapshot", None)
        self.checked_with.append(snapshot)
        if snapshot is not None and not self.fired:
            self.fired = True
            return True
        return False


def test_leader_rechecks_on_the_newest_snapshot_and_rebalances(server: ServerThread) -> None:
    assignor = RecheckingAssignor()
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a", "b"])
    worker = WorkerClient(
        WorkerConfig(group_id=G, coordinators=server.address, assignors=("test-recheck",), session_timeout_ms=3000,
                     heartbeat_interval_ms=50),
        Recorder(), assignor_lookup=lambda name: assignor,
    ).start()
    try:
        first = wait_settled([worker], admin, 2)
        snapshot = pb.LoadSnapshot(group_id=G, snapshot_id="s1", created_ms=1,
                                   tasks=[pb.TaskLoadStats(task_id="a", long_msg_rate_in=5.0)])
        admin.publish_load_snapshot(snapshot)
        later = admin.wait_for(G, lambda d: d.state == pb.STABLE and d.generation > first.generation, 20)
        assert later.generation == first.generation + 1
        seen = [s for s in assignor.checked_with if s is not None]
        assert seen and seen[0].tasks["a"].long_msg_rate_in == 5.0  # type: ignore[attr-defined]
    finally:
        worker.close()
        admin.close()
