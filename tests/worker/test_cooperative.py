"""Incremental cooperative rebalancing (KIP-429): negotiated per group, two-phase moves enforced by
the coordinator, workers that keep running what they keep."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.cooperative import cooperative_step
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerState
from tests.worker.test_e2e_grpc import G, make_worker

BOTH = ["eager", "cooperative"]


def coop_join(h: Harness, member_id: str = "", owned: Sequence[str] = (), protocols: Sequence[str] = BOTH,
              instance: str = "") -> object:
    request = pb.JoinGroupRequest(
        group_id=G, member_id=member_id, client_id="w", session_timeout_ms=30_000, rebalance_timeout_ms=10_000,
        protocols=["round-robin"], rebalance_protocols=list(protocols), instance_id=instance,
        metadata=pb.MemberMetadata(owned=[pb.TaskReplica(task_id=t) for t in owned]),
    )
    return h.run(lambda token: h.model.join(request, token, "test"), pb.JoinGroupResponse)


def test_the_group_is_cooperative_only_when_every_member_offers_it() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    a = coop_join(h, instance="a")
    b = coop_join(h, instance="b", protocols=["eager"])
    h.advance(2.5)
    assert a.response.rebalance_protocol == b.response.rebalance_protocol == "eager"  # type: ignore[attr-defined]
    h2 = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    c = coop_join(h2, instance="c")
    d = coop_join(h2, instance="d")
    h2.advance(2.5)
    assert c.response.rebalance_protocol == d.response.rebalance_protocol == "cooperative"  # type: ignore[attr-defined]


def test_a_task_moves_over_two_generations_and_the_coordinator_enforces_it() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h.put_tasks(G, "t1", "t2")
    a_join = coop_join(h, instance="a")
    a = a_join.response.member_id  # type: ignore[attr-defined]
    assert h.sync(G, a, 1, {a: ["t1", "t2"]}).code == pb.NONE
    b_join = coop_join(h, instance="b")  # b arrives: a rebalance, a re-joins still running t1 and t2
    a_again = coop_join(h, a, owned=["t1", "t2"], instance="a")
    b = b_join.response.member_id  # type: ignore[attr-defined]
    leader_view = a_again.response  # type: ignore[attr-defined]
    assert leader_view.generation == 2 and leader_view.rebalance_protocol == "cooperative"
    assert {m.member_id: [r.task_id for r in m.assigned] for m in leader_view.members} == {a: ["t1", "t2"], b: []}
    # handing t2 straight to b skips the revoke: refused, and the group rebalances
    skipped = h.sync(G, a, 2, {a: ["t1"], b: ["t2"]})
    assert skipped.code == pb.INVALID_ASSIGNMENT and "may still run it" in skipped.response.error.message
    a3 = coop_join(h, a, owned=["t1", "t2"], instance="a")
    coop_join(h, b, instance="b")
    assert a3.response.generation == 3  # type: ignore[attr-defined]
    # the first step: t2 leaves a and goes to nobody yet
    assert h.sync(G, a, 3, {a: ["t1"], b: []}).code == pb.NONE
    assert h.state(G) == "Stable" and h.group(G).revoking == {("t2", 0)}
    # a stopped t2 and re-joins at once; the next generation gives t2 to b
    a4 = coop_join(h, a, owned=["t1"], instance="a")
    coop_join(h, b, instance="b")
    assert [m.assigned for m in a4.response.members if m.member_id == b] == [[]]  # type: ignore[attr-defined]
    assert h.sync(G, a, 4, {a: ["t1"], b: ["t2"]}).code == pb.NONE
    assert h.group(G).revoking == set() and h.state(G) == "Stable"


def test_a_departed_members_tasks_are_free_at_once() -> None:
    """A member that left runs nothing: its tasks go to the others in the same generation."""
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    h.put_tasks(G, "t1", "t2")
    a_join, b_join = coop_join(h, instance="a"), coop_join(h, instance="b")
    h.advance(2.5)
    a, b = a_join.response.member_id, b_join.response.member_id  # type: ignore[attr-defined]
    h.sync(G, b, 1)
    assert h.sync(G, a, 1, {a: ["t1"], b: ["t2"]}).code == pb.NONE
    h.leave(G, b)
    coop_join(h, a, owned=["t1"], instance="a")
    assert h.sync(G, a, 2, {a: ["t1", "t2"]}).code == pb.NONE


def test_cooperative_step_holds_back_what_another_member_runs() -> None:
    context = AssignmentContext(
        group_id=G, generation=2, rebalance_protocol="cooperative",
        members=(MemberInfo("a", owned=(TaskReplica("t1"), TaskReplica("t2"))), MemberInfo("b")),
        tasks=(TaskSpec("t1"), TaskSpec("t2"), TaskSpec("t3")),
    )
    target = Assignment(members={"a": [TaskReplica("t1")], "b": [TaskReplica("t2"), TaskReplica("t3")]})
    step = cooperative_step(context, target)
    assert step.members == {"a": [TaskReplica("t1")], "b": [TaskReplica("t3")]}  # t2 waits for a to stop it
    eager = AssignmentContext(group_id=G, generation=2, members=context.members, tasks=context.tasks)
    assert cooperative_step(eager, target) is target


class Log:
    """An ownership log shared by in-process workers: (seq, worker, event, task)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[tuple[float, str, str, str]] = []

    def listener(self, name: str) -> object:
        log = self

        class Listener:
            def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
                log.add(name, "start", tasks)

            def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
                log.add(name, "stop", tasks)

            def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
                log.add(name, "stop", tasks)

        return Listener()

    def add(self, name: str, event: str, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            for task in tasks:
                self.entries.append((time.monotonic(), name, event, task.task_id))

    def check_single_owner(self) -> None:
        """No task runs on two workers at once."""
        running: dict[str, str] = {}
        for _, name, event, task in sorted(self.entries):
            if event == "start":
                assert task not in running, f"{task} started on {name} while {running[task]} runs it"
                running[task] = name
            else:
                assert running.pop(task, None) == name, f"{name} stopped {task}, which it did not run"


def stable_in(generation: int) -> Callable[[WorkerClient], bool]:
    return lambda c: c.state is WorkerState.STABLE and c.generation == generation


@pytest.mark.slow
def test_a_worker_added_to_a_cooperative_group_stops_nothing_that_stays(server: ServerThread) -> None:
    admin = AdminClient(server.address)
    tasks = [f"t{i:02d}" for i in range(40)]
    admin.put_tasks(G, tasks)
    log = Log()

    def worker(name: str) -> WorkerClient:
        return make_worker(server.address, name, log.listener(name), rebalance_protocol="cooperative",
                           assignors=("sticky",), session_timeout_ms=10_000, instance_id=name)

    workers = [worker(f"w{i}").start() for i in range(8)]
    try:
        # settled: Stable with every task placed, and every worker in that generation (a worker that had
        # tasks revoked re-joins once more after the group first looks Stable from outside)
        deadline = time.monotonic() + 60
        while True:
            before = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 8
                                    and sum(len(m.assigned) for m in d.members) == 40, 30)
            generation = before.generation
            if all(w.wait_until(stable_in(generation), 5) for w in workers) \
                    and admin.describe_group(G).generation == generation:
                break
            assert time.monotonic() < deadline, "the eight workers never settled in one generation"
        owned_before = {w.config.client_id: set(w.assigned_tasks) for w in workers}
        mark = len(log.entries)
        newcomer = worker("w8").start()
        workers.append(newcomer)
        after = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 9 and not any(
            m.member.client_id == "w8" and not m.assigned for m in d.members)
            and sum(len(m.assigned) for m in d.members) == 40, 30)
        assert all(w.wait_until(lambda c: c.state is WorkerState.STABLE and c.generation == after.generation, 10)
                   for w in workers)
        stopped = [(name, task) for _, name, event, task in log.entries[mark:] if event == "stop"]
        for w in workers[:-1]:
            kept = owned_before[w.config.client_id] & set(w.assigned_tasks)
            assert not {t.task_id for t in kept} & {task for name, task in stopped if name == w.config.client_id}
        moved = {task for _, task in stopped}
        assert moved and len(moved) <= 5  # only what the newcomer takes moves
        assert after.generation == before.generation + 2  # the revoke, then the hand-over
        log.check_single_owner()
    finally:
        for w in workers:
            w.close(leave_group=True)
        admin.close()


def grace_pair(h: Harness) -> tuple[str, str]:
    h.put_tasks(G, "t1", "t2")
    a_join, b_join = coop_join(h, instance="a"), coop_join(h, instance="b")
    h.advance(2.5)
    a, b = a_join.response.member_id, b_join.response.member_id  # type: ignore[attr-defined]
    h.sync(G, b, 1)
    assert h.sync(G, a, 1, {a: ["t1"], b: ["t2"]}).code == pb.NONE
    return a, b


def test_a_departed_static_member_gets_its_tasks_back_within_the_grace() -> None:
    """Connect's scheduled rebalance delay, per member: b's session expires at 30 s, its tasks wait
    20 s more; b is back at 40 s and takes them again without a rebalance."""
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000, group_departed_member_grace_ms=20_000))
    a, b = grace_pair(h)
    for _ in range(8):
        h.advance(5.0)
        h.heartbeat(G, a, 1)  # a lives; b is gone (a restart that takes long)
    assert b in h.group(G).members and h.group(G).members[b].departed and h.state(G) == "Stable"
    back = coop_join(h, instance="b")
    assert back.code == pb.NONE and back.response.generation == 1  # type: ignore[attr-defined]
    new_b = back.response.member_id  # type: ignore[attr-defined]
    assert [t.task_id for t in h.sync(G, new_b, 1).response.tasks] == ["t2"]
    assert not h.group(G).members[new_b].departed


def test_a_departed_static_member_that_does_not_return_loses_its_tasks_after_the_grace() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000, group_departed_member_grace_ms=20_000))
    a, b = grace_pair(h)
    for _ in range(11):
        h.advance(5.0)
        h.heartbeat(G, a, 1)
    assert b not in h.group(G).members and h.state(G) == "PreparingRebalance"
