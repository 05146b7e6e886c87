"""The worker when things go wrong around it: a crashing assignor, a coordinator that hangs.

``client.state`` must say what the worker is doing: a sleep injected into the client notes
the state at every backoff, and fakes that hang note the deadline each call came with.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import Assignment, AssignmentContext
from groupcoord.assignors.round_robin import RoundRobinAssignor
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState
from tests.worker.test_e2e_grpc import G, Recorder, make_worker, wait_settled

# gRPC carries a deadline as a rounded-up timeout header: the server may see a few ms more than was set
SLACK_S = 0.05


class BackoffLog:
    """An injectable ``sleep``: notes (seconds, the client's state, its coordinator) and waits for real,
    cut short by ``done`` (set before closing, as the client's own sleep is cut short by close)."""

    def __init__(self) -> None:
        self.entries: list[tuple[float, WorkerState, str]] = []
        self.done = threading.Event()
        self.client: WorkerClient | None = None

    def __call__(self, seconds: float) -> None:
        assert self.client is not None
        self.entries.append((seconds, self.client.state, self.client.coordinator_address))
        self.done.wait(seconds)

    def states(self) -> set[WorkerState]:
        return {state for _, state, _ in self.entries}


class CrashingAssignor:
    """Round-robin, except while ``broken``: then a plain RuntimeError (not an AssignorError)."""

    name = "crashing"

    def __init__(self) -> None:
        self.broken = True
        self.calls = 0

    def assign(self, context: AssignmentContext) -> Assignment:
        self.calls += 1
        if self.broken:
            raise RuntimeError("the assignor's own bug")
        return RoundRobinAssignor().assign(context)


def test_a_crashing_assignor_reaches_last_error_and_the_worker_backs_off_in_preparing_join(
    server: ServerThread,
) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a", "b"])
    assignor = CrashingAssignor()
    backoff = BackoffLog()
    recorder = Recorder()
    worker = WorkerClient(
        WorkerConfig(group_id=G, coordinators=server.address, client_id="leader", assignors=("crashing",),
                     session_timeout_ms=3000, heartbeat_interval_ms=100, rebalance_timeout_ms=5000,
                     retry_backoff_ms=20, retry_backoff_max_ms=200),
        recorder, assignor_lookup=lambda name: assignor, sleep=backoff,
    )
    backoff.client = worker
    worker.start()
    try:
        failed = admin.wait_for(G, lambda d: "RuntimeError: the assignor's own bug" in d.last_error, 10)
        assert re.fullmatch(r"generation \d+: the leader's assignor failed: RuntimeError: the assignor's own bug",
                            failed.last_error)
        assert worker.wait_until(lambda w: len(backoff.entries) >= 3 and assignor.calls >= 3, 10)
        # every backoff after a failed attempt shows PreparingJoin: no SyncGroup or JoinGroup is in flight then
        assert backoff.states() == {WorkerState.PREPARING_JOIN}
        assert all(seconds > 0 for seconds, _, _ in backoff.entries)  # INVALID_ASSIGNMENT backs off
        assert worker.fatal_error is None and recorder.events == []

        assignor.broken = False  # the bug is fixed (e.g. the catalog changed): the same loop recovers
        recovered = wait_settled([worker], admin, 2)
        assert recovered.last_error == "" and len(worker.assigned_tasks) == 2
    finally:
        backoff.done.set()
        worker.close()
        admin.close()
    assert worker.state is WorkerState.DOWN


class HangingCoordinator(pb_grpc.GroupCoordinatorServicer):
    """A coordinator of a one-member group that answers the first ``answered[method]`` calls of a
    method (all calls of one not named) and leaves the rest hanging until the caller gives up.

    Each call's deadline as the server saw it is kept in ``time_left``.
    """

    def __init__(self, answered: dict[str, int]) -> None:
        self.answered = answered
        self.calls: Counter[str] = Counter()
        self.time_left: dict[str, list[float]] = {}
        self.changed = threading.Condition()
        self._hanging: list[threading.Event] = []

    def wait_calls(self, method: str, count: int, timeout: float = 10) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.calls[method] >= count, timeout)

    def release(self) -> None:
        with self.changed:
            for ended in self._hanging:
                ended.set()

    def _arrive(self, method: str, context: Any) -> None:
        ended = threading.Event()
        with self.changed:
            self.calls[method] += 1
            self.time_left.setdefault(method, []).append(context.time_remaining())
            hang = self.calls[method] > self.answered.get(method, self.calls[method])
            if hang:
                self._hanging.append(ended)
            self.changed.notify_all()
        if hang:
            context.add_callback(ended.set)  # the caller's deadline passed, or it cancelled
            ended.wait()

    def JoinGroup(self, request: pb.JoinGroupRequest, context: Any) -> pb.JoinGroupResponse:
        self._arrive("JoinGroup", context)
        member = request.member_id or "m-1"
        return pb.JoinGroupResponse(
            generation=self.calls["JoinGroup"], protocol=request.protocols[0], leader_id=member, member_id=member,
            members=[pb.GroupMember(member_id=member, client_id=request.client_id, metadata=request.metadata)],
            tasks=[pb.Task(task_id="a", replicas=1)],
        )

    def SyncGroup(self, request: pb.SyncGroupRequest, context: Any) -> pb.SyncGroupResponse:
        self._arrive("SyncGroup", context)
        mine = [t for a in request.assignments if a.member_id == request.member_id for t in a.tasks]
        return pb.SyncGroupResponse(generation=request.generation, tasks=mine)

    def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        self._arrive("Heartbeat", context)
        return pb.HeartbeatResponse()

    def LeaveGroup(self, request: pb.LeaveGroupRequest, context: Any) -> pb.LeaveGroupResponse:
        self._arrive("LeaveGroup", context)
        return pb.LeaveGroupResponse()


@contextmanager
def serving(fake: HangingCoordinator) -> Iterator[str]:
    server = grpc.server(ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_GroupCoordinatorServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        fake.release()
        server.stop(None)


def hung_worker(addresses: str, backoff: BackoffLog, listener: object | None = None, **overrides: Any) -> WorkerClient:
    settings: dict[str, Any] = {
        "group_id": G, "coordinators": addresses, "client_id": "w", "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000, "retry_backoff_ms": 20, "retry_backoff_max_ms": 50,
    }
    settings.update(overrides)
    worker = WorkerClient(WorkerConfig(**settings), listener or Recorder(), sleep=backoff)  # type: ignore[arg-type]
    backoff.client = worker
    return worker


def test_a_hung_join_gives_up_at_its_deadline_and_the_worker_tries_the_next_coordinator() -> None:
    first, second = HangingCoordinator({"JoinGroup": 0}), HangingCoordinator({"JoinGroup": 0})
    backoff = BackoffLog()
    with serving(first) as first_address, serving(second) as second_address:
        # JoinGroup's deadline: rebalance timeout + request timeout = 1 s
        worker = hung_worker(f"{first_address},{second_address}", backoff,
                             rebalance_timeout_ms=400, request_timeout_ms=600).start()
        try:
            assert first.wait_calls("JoinGroup", 1)
            assert 0 < first.time_left["JoinGroup"][0] <= 1.0 + SLACK_S
            assert worker.state is WorkerState.JOINING  # the call is in flight: the state says so
            # the deadline passes: back to PreparingJoin, pointed at the next address, for the whole backoff
            assert worker.wait_until(lambda w: len(backoff.entries) >= 1, 10)
            assert backoff.entries[0][1:] == (WorkerState.PREPARING_JOIN, second_address)
            assert second.wait_calls("JoinGroup", 1)
            assert worker.wait_until(lambda w: len(backoff.entries) >= 2, 10)
            assert backoff.entries[1][1:] == (WorkerState.PREPARING_JOIN, first_address)  # and round again
            assert backoff.states() == {WorkerState.PREPARING_JOIN} and worker.fatal_error is None
        finally:
            backoff.done.set()
            worker.close()


def test_close_cancels_a_hung_join_at_once() -> None:
    fake = HangingCoordinator({"JoinGroup": 0})
    backoff = BackoffLog()
    with serving(fake) as address:
        worker = hung_worker(address, backoff, request_timeout_ms=60_000).start()  # JoinGroup deadline: 65 s
        assert fake.wait_calls("JoinGroup", 1)
        assert fake.time_left["JoinGroup"][0] > 60
        assert worker.state is WorkerState.JOINING
        worker.close(timeout=10)
        # Down is the loop's last step: the loop has ended, long before the call's deadline
        assert worker.state is WorkerState.DOWN and worker.fatal_error is None
        assert backoff.entries == []


def test_a_hung_heartbeat_keeps_the_tasks_for_a_session_then_rejoins() -> None:
    fake = HangingCoordinator({"Heartbeat": 0, "JoinGroup": 1})  # joins once, then nothing answers
    backoff = BackoffLog()
    recorder = Recorder()
    with serving(fake) as address:
        worker = hung_worker(address, backoff, recorder, session_timeout_ms=1000, heartbeat_interval_ms=100,
                             request_timeout_ms=30_000).start()
        try:
            assert worker.wait_until(lambda w: w.state is WorkerState.STABLE, 10)
            assert [str(t) for t in worker.assigned_tasks] == ["a#0"]
            assert fake.wait_calls("Heartbeat", 1)
            # a heartbeat in Stable gives up after half the session, not the 30 s request timeout
            assert 0 < fake.time_left["Heartbeat"][0] <= 0.5 + SLACK_S
            # a whole session without an answer: tasks revoked, PreparingJoin, then a JoinGroup in flight again
            assert fake.wait_calls("JoinGroup", 2)
            assert worker.wait_until(lambda w: w.state is WorkerState.JOINING, 10)
            assert [kind for kind, _, _ in recorder.events] == ["assigned", "revoked"]
            assert worker.assigned_tasks == ()
            # heartbeats that timed out within the session did not move the worker out of Stable
            assert fake.calls["Heartbeat"] >= 2 and backoff.states() == {WorkerState.STABLE}
        finally:
            backoff.done.set()
            worker.close(timeout=10)
        assert worker.state is WorkerState.DOWN
        assert fake.calls["LeaveGroup"] == 1  # it said goodbye on the way out, the hung JoinGroup cancelled


def test_a_join_listener_hears_each_join(server: ServerThread) -> None:
    joined: list[tuple[str, int, bool]] = []

    class Listener(Recorder):
        def on_joined(self, member_id: str, generation: int, is_leader: bool) -> None:
            joined.append((member_id, generation, is_leader))

    admin = AdminClient(server.address)
    admin.put_tasks(G, ["a"])
    worker = make_worker(server.address, "w", Listener()).start()
    try:
        settled = wait_settled([worker], admin, 1)
        assert joined[-1] == (worker.member_id, settled.generation, True)
    finally:
        worker.close()
        admin.close()


def test_after_a_heartbeat_the_coordinator_did_not_answer_the_next_one_comes_sooner() -> None:
    """During an outage the worker heartbeats at its retry backoff (doubling, at most the heartbeat
    interval), so a coordinator that comes back hears from it at once, not an interval later."""
    backoff = BackoffLog()
    server = ServerThread(CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0))).start()
    worker = hung_worker(server.address, backoff, heartbeat_interval_ms=300, session_timeout_ms=6000,
                         retry_backoff_ms=20).start()
    try:
        assert worker.wait_until(lambda w: w.state is WorkerState.STABLE, 10)
        assert worker.wait_until(lambda w: w.generation > 0, 10)
        assert {s for s, state, _ in backoff.entries if state is WorkerState.STABLE} <= {0.3}  # all is well
        before = len(backoff.entries)
        server.stop()
        deadline = time.monotonic() + 10  # the backoff log changes without waking wait_until: poll it
        while len(backoff.entries) < before + 7 and time.monotonic() < deadline:
            time.sleep(0.01)
        after = [s for s, state, _ in backoff.entries[before:] if state is WorkerState.STABLE]
        while after and after[0] == 0.3:  # heartbeats answered before the stop
            after.pop(0)
        assert after[:5] == [0.02, 0.04, 0.08, 0.16, 0.3], after
        assert worker.state is WorkerState.STABLE  # tasks kept meanwhile (the session has not run out)
    finally:
        backoff.done.set()
        worker.close()
        server.stop()
