"""A cooperative worker whose JoinGroup or SyncGroup goes unanswered gives its tasks up by the
earliest time the coordinator could have removed it, not at the call's deadline (issue 26 item 7).

Worker a reaches the coordinator through a gRPC proxy that holds one of its calls mid-rebalance
while the others complete. Every worker's listener writes to one timeline (one process, one
monotonic clock), and no task may start on a worker while another still runs it.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig
from groupcoord.worker.give_up import give_up_at
from groupcoord.worker.session import Membership
from tests.chaos.rpc_proxy import RpcProxy

G = "lost-join"
TASKS = [f"t{i}" for i in range(6)]
SESSION_MS = 4_000
REBALANCE_MS = 20_000  # far longer than the session: the old deadline (rebalance + request timeout)


class Timeline:
    """Every worker's starts and stops, in the order they happened."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, str]] = []  # (time, worker, start|stop, task)

    def listener(self, name: str) -> Listener:
        return Listener(self, name)

    def record(self, name: str, kind: str, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            self.events.extend((time.monotonic(), name, kind, t.task_id) for t in tasks)

    def double_owners(self) -> list[str]:
        running: dict[str, str] = {}
        problems = []
        with self.lock:
            events = list(self.events)
        for _, worker, kind, task in events:
            if kind == "start":
                if task in running and running[task] != worker:
                    problems.append(f"{task} started on {worker} while {running[task]} ran it")
                running[task] = worker
            elif running.get(task) == worker:
                del running[task]
        return problems

    def runs(self, name: str) -> set[str]:
        running: set[str] = set()
        with self.lock:
            for _, worker, kind, task in self.events:
                if worker == name:
                    (running.add if kind == "start" else running.discard)(task)
        return running


class Listener:
    def __init__(self, timeline: Timeline, name: str) -> None:
        self.timeline, self.name = timeline, name

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.timeline.record(self.name, "start", tasks)

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.timeline.record(self.name, "stop", tasks)

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self.timeline.record(self.name, "lost", tasks)


def config_for(name: str, address: str) -> WorkerConfig:
    return WorkerConfig(group_id=G, coordinators=address, client_id=name, rebalance_protocol="cooperative",
                        assignors=("sticky",), session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200,
                        rebalance_timeout_ms=REBALANCE_MS, request_timeout_ms=10_000)


def worker(name: str, address: str, timeline: Timeline) -> WorkerClient:
    return WorkerClient(config_for(name, address), timeline.listener(name)).start()


class AsyncWorkerInThread:
    """An ``AsyncWorkerClient`` on its own event loop in a thread, so the test can drive it beside
    threaded workers (its listener is the same plain-function one: the timeline takes a lock)."""

    def __init__(self, name: str, address: str, timeline: Timeline) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = AsyncWorkerClient(config_for(name, address), timeline.listener(name))
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"loop-{name}", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.client.start(), self.loop).result(10)

    def close(self, timeout: float) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
            self.loop.close()


def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def stable(admin: AdminClient, members: int) -> Callable[[], bool]:
    def check() -> bool:
        d = admin.describe_group(G)
        return (d.state == pb.STABLE and len(d.members) == members and not d.unassigned
                and sum(len(m.assigned) for m in d.members) == len(TASKS))
    return check


def test_the_give_up_time_is_the_earliest_removal() -> None:
    # the session since the last answer, when the call was sent soon after it
    assert give_up_at(last_answer=10.0, sent=10.5, session_timeout_s=4.0, rebalance_timeout_s=20.0) == 14.0
    # the rebalance timeout since the call was sent, when that is sooner
    assert give_up_at(last_answer=10.0, sent=10.5, session_timeout_s=45.0, rebalance_timeout_s=2.0) == 12.5


def test_membership_counts_the_session_from_every_answer_and_gives_up_only_cooperative_tasks() -> None:
    now = [100.0]
    config = WorkerConfig(group_id=G, coordinators="127.0.0.1:1", rebalance_protocol="cooperative",
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200, rebalance_timeout_ms=REBALANCE_MS)
    session = Membership(config, lambda: now[0])
    session.rebalance_protocol = "cooperative"
    now[0] = 103.0  # a heartbeat sent at 102 was answered REBALANCE_IN_PROGRESS: the session restarted
    session.heartbeat_failed(errors.RebalanceInProgressError("rebalancing"), sent=102.0)
    assert session.give_up_in(sent=103.0, running_tasks=True) == pytest.approx(102.0 + 4.0 - 0.4 - 103.0)  # a tenth of the session early
    assert session.give_up_in(sent=103.0, running_tasks=False) is None
    session.joined(pb.JoinGroupResponse(member_id="m", generation=3, rebalance_protocol="cooperative"), sent=104.0)
    assert session.give_up_in(sent=104.5, running_tasks=True) == pytest.approx(104.0 + 4.0 - 0.4 - 103.0)
    session.rebalance_protocol = "eager"  # eager tasks stopped before the join: nothing to give up
    assert session.give_up_in(sent=104.5, running_tasks=True) is None


@pytest.mark.slow
@pytest.mark.parametrize("client", ["threaded", "asyncio"])
@pytest.mark.parametrize("call", ["JoinGroup", "SyncGroup"])
def test_a_worker_whose_call_is_black_holed_stops_before_anyone_else_starts(server: ServerThread, call: str,
                                                                            client: str) -> None:
    admin = AdminClient(server.address, timeout_s=10)
    admin.put_tasks(G, TASKS)
    timeline = Timeline()
    with RpcProxy(server.address) as proxy:
        workers: list[WorkerClient | AsyncWorkerInThread] = [worker("b", server.address, timeline)]  # b first: the leader (a's SyncGroup then carries nothing)
        wait(stable(admin, 1), 30, "b alone")
        a = AsyncWorkerInThread if client == "asyncio" else worker
        workers += [a("a", proxy.address, timeline), worker("c", server.address, timeline)]
        try:
            wait(stable(admin, 3), 60, "a, b and c stable")
            wait(lambda: bool(timeline.runs("a")), 30, "a runs something")  # the listener runs after the answer
            arrived = proxy.hold(call)  # a's next call of this kind vanishes
            workers.append(worker("d", server.address, timeline))  # a rebalance, mid-way of which a's call is lost
            assert arrived.wait(30), f"a sent its {call}"
            held_at = time.monotonic()
            wait(lambda: {m.member.client_id for m in admin.describe_group(G).members} == {"b", "c", "d"}
                 and stable(admin, 3)(), 60, "b, c and d stable without a")
            assert timeline.double_owners() == []
            assert not timeline.runs("a")
            with timeline.lock:
                lost = [at for at, name, kind, _ in timeline.events if name == "a" and kind == "lost"]
            assert lost and lost[0] - held_at < SESSION_MS / 1000 + 1  # not the call's deadline (30 s)
            print(f"\na gave its tasks up {lost[0] - held_at:.2f}s after its {call} was held "
                  f"(session {SESSION_MS / 1000:.0f}s, call deadline {(REBALANCE_MS + 10_000) / 1000:.0f}s)",
                  file=sys.stderr)
        finally:
            for w in reversed(workers):
                w.close(timeout=5)
    admin.close()


@pytest.mark.slow
def test_a_join_that_gets_through_within_the_session_takes_the_tasks_back_without_another_rebalance(
        server: ServerThread) -> None:
    admin = AdminClient(server.address, timeout_s=10)
    admin.put_tasks(G, TASKS)
    timeline = Timeline()
    with RpcProxy(server.address) as proxy:
        leader = worker("b", server.address, timeline)
        workers = [leader]
        wait(stable(admin, 1), 30, "b alone")
        workers += [worker("a", proxy.address, timeline), worker("c", server.address, timeline)]
        try:
            wait(stable(admin, 3), 60, "a, b and c stable")
            before = admin.describe_group(G)
            held = timeline.runs("a")
            # a's join reaches the coordinator halfway through its session; the answer comes back late,
            # after a's give-up time but well within the session the coordinator restarted for it
            arrived = proxy.hold("JoinGroup", forward_after_s=SESSION_MS / 2000, answer_after_s=SESSION_MS * 0.75 / 1000)
            leader.request_rebalance()  # the leader re-joins: a rebalance in which nothing needs to move
            assert arrived.wait(30), "a sent its JoinGroup"
            wait(lambda: not timeline.runs("a"), SESSION_MS / 1000 + 5, "a gives its tasks up")
            wait(lambda: timeline.runs("a") == held, 30, "a takes its tasks back")
            wait(stable(admin, 3), 30, "stable")
            after = admin.describe_group(G)
            assert after.generation == before.generation + 1  # one rebalance: a was never removed
            assert timeline.double_owners() == []
        finally:
            for w in workers:
                w.close(timeout=5)
    admin.close()
