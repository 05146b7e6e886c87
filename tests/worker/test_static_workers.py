"""Static membership from the worker client's side, against a real coordinator on loopback."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerState
from tests.worker.test_e2e_grpc import G, Recorder, make_worker, wait_settled


def test_a_static_worker_restarted_within_its_session_gets_its_tasks_back(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, [f"t{i}" for i in range(4)])
    steady = Recorder()
    a = make_worker(server.address, "a", steady, instance_id="inst-a", session_timeout_ms=10_000).start()
    b = make_worker(server.address, "b", instance_id="inst-b", session_timeout_ms=10_000).start()
    try:
        before = wait_settled([a, b], admin, 4)
        seen = len(steady.events)  # a may have been through more than one generation while b started
        b_tasks = b.assigned_tasks
        b.close()  # static: no LeaveGroup
        assert admin.describe_group(G).state == pb.STABLE and len(admin.describe_group(G).members) == 2
        # the same instance, a new process
        b = make_worker(server.address, "b", instance_id="inst-b", session_timeout_ms=10_000).start()
        after = wait_settled([a, b], admin, 4)
        assert after.generation == before.generation  # no rebalance
        assert b.assigned_tasks == b_tasks
        assert steady.events[seen:] == []  # a never stopped anything
        assert {m.member.instance_id for m in after.members} == {"inst-a", "inst-b"}
    finally:
        a.close(leave_group=True)
        b.close(leave_group=True)
        admin.close()


def test_a_fenced_worker_stops_with_the_error_and_revokes_its_tasks(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["t0", "t1"])
    old_listener = Recorder()
    old = make_worker(server.address, "old", old_listener, instance_id="same").start()
    new = None
    try:
        wait_settled([old], admin, 2)
        new = make_worker(server.address, "new", instance_id="same").start()  # e.g. a copy started by mistake
        assert old.wait_until(lambda w: w.state is WorkerState.DOWN, 10)
        assert isinstance(old.fatal_error, errors.FencedInstanceIdError)
        assert old.assigned_tasks == () and old_listener.events[-1][0] == "revoked"
        assert new.wait_until_stable(10) and len(new.assigned_tasks) == 2
    finally:
        old.close()
        if new is not None:
            new.close(leave_group=True)
        admin.close()


class RevokeHeldOnceFenced(Recorder):
    """Holds the fenced worker's last revoke (its shutdown) until the test's wait has returned, or 2 s."""

    def __init__(self) -> None:
        super().__init__()
        self.worker: object = None
        self.wait_returned = threading.Event()

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        super().on_revoked(tasks)
        if getattr(self.worker, "fatal_error", None) is not None:
            self.wait_returned.wait(2.0)


def test_a_wait_for_down_outlasts_the_shutdown_of_a_fenced_worker(server: ServerThread) -> None:
    """A fatal error ends a wait only once the shutdown it starts is over: make test once saw the wait for DOWN
    return False while the fenced worker was still revoking its tasks (the tasks' change woke the waiter)."""
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["t0", "t1"])
    listener = RevokeHeldOnceFenced()
    old = make_worker(server.address, "old", listener, instance_id="same").start()
    listener.worker = old
    new = None
    try:
        wait_settled([old], admin, 2)
        new = make_worker(server.address, "new", instance_id="same").start()
        down = old.wait_until(lambda w: w.state is WorkerState.DOWN, 10)
        listener.wait_returned.set()
        assert down and isinstance(old.fatal_error, errors.FencedInstanceIdError)
    finally:
        listener.wait_returned.set()
        old.close()
        if new is not None:
            new.close(leave_group=True)
        admin.close()


def test_a_static_worker_asked_to_leave_on_close_leaves(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks(G, ["t0", "t1"])
    a = make_worker(server.address, "a", instance_id="inst-a", session_timeout_ms=10_000).start()
    b = make_worker(server.address, "b", instance_id="inst-b", session_timeout_ms=10_000).start()
    try:
        before = wait_settled([a, b], admin, 2)
        b.close(leave_group=True)  # a scale-in, not a restart
        after = wait_settled([a], admin, 2)
        assert after.generation > before.generation and len(a.assigned_tasks) == 2
    finally:
        a.close(leave_group=True)
        admin.close()
