"""The leader-side assignor over a real gRPC server: raw-stub members of a "client:round-robin" group,
one of them acting as the leader (it deals the catalog out and answers only what changed); the
server's timers on an injected clock."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.coordinator.rpc.raw_member import RawMember
from tests.zookeeper_server import wait_until

G = "g"


def deal(asked: pb.TargetRequest) -> pb.TargetAnswer:
    """The leader's assignor, sticky: each member keeps what it has up to an even share, the rest is
    dealt out; only the members whose target changes are listed."""
    ids = sorted(m.member_id for m in asked.members)
    tasks = sorted(t.task_id for t in asked.tasks)
    quota = {mid: len(tasks) // len(ids) + (i < len(tasks) % len(ids)) for i, mid in enumerate(ids)}
    current = {m.member_id: sorted(t.task_id for t in m.assigned if t.task_id in tasks) for m in asked.members}
    new = {mid: current[mid][:quota[mid]] for mid in ids}
    kept = {t for mine in new.values() for t in mine}
    for task in (t for t in tasks if t not in kept):
        new[next(mid for mid in ids if len(new[mid]) < quota[mid])].append(task)
    answer = pb.TargetAnswer(group_epoch=asked.group_epoch)
    for mid in ids:
        if sorted(new[mid]) != current[mid]:
            answer.assignments.add(member_id=mid, tasks=[pb.TaskReplica(task_id=t) for t in new[mid]])
    return answer


@pytest.fixture
def server() -> Iterator[tuple[ServerThread, FakeClock]]:
    clock = FakeClock()
    runtime = CoordinatorRuntime(CoordinatorConfig(), clock=clock, on_change=lambda group: group.validate())
    with ServerThread(runtime) as thread:
        yield thread, clock


def test_a_raw_leader_computes_the_target_and_a_wrong_answer_falls_back(
        server: tuple[ServerThread, FakeClock]) -> None:
    thread, clock = server

    def advance(seconds: float) -> None:
        thread.call(lambda: (clock.advance(seconds), thread.runtime.poll_timers()))

    with grpc.insecure_channel(thread.address) as channel:
        admin, stub = pb_grpc.GroupAdminStub(channel), pb_grpc.GroupCoordinatorStub(channel)
        admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=f"t{i}") for i in range(4)]), timeout=10)
        a, b = RawMember(stub, "a"), RawMember(stub, "b")
        a.join(), b.join()
        group = thread.call(lambda: thread.runtime.model.consumer.groups[G])
        answers: list[pb.TargetAnswer] = []

        def lead() -> bool:
            """The leader answers what it is asked; everybody heartbeats; done when the target is current."""
            advance(0.2)
            if a.asked is not None:
                answers.append(deal(a.asked))
                a.asked = None
                a.beat(answers[-1])
            for m in members:
                m.beat()
            assert not [m.asked for m in members if m is not a and m.asked is not None]  # only the leader
            for m in members:
                assert m.running.isdisjoint(set().union(*(o.running for o in members if o is not m)))
            current = thread.call(lambda: group.target_epoch == group.epoch)
            return current and len(set().union(*(m.running for m in members))) == 4 and all(m.running for m in members)

        members = [a, b]
        wait_until(lead, 10, "the leader's target")
        assert a.running | b.running == {f"t{i}" for i in range(4)} and len(a.running) == 2
        assert not thread.call(lambda: group.last_error)

        c = RawMember(stub, "c")
        c.join()
        members.append(c)
        answers.clear()
        wait_until(lead, 10, "three members sharing the catalog")
        assert len(a.running | b.running | c.running) == 4
        assert answers and all(len(answer.assignments) < 3 for answer in answers)  # only the members that move
        assert not thread.call(lambda: group.failed_leader)  # every answer was taken

        admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="t9")]), timeout=10)
        advance(0.2)
        a.asked = None
        a.beat()
        assert a.asked is not None
        wrong = pb.TargetAnswer(group_epoch=a.asked.group_epoch)
        wrong.assignments.add(member_id=a.member_id, tasks=[pb.TaskReplica(task_id="nowhere")])
        a.beat(wrong)  # refused: the coordinator's own round-robin computes the target instead

        def fell_back() -> bool:
            advance(0.2)
            for m in (a, b, c):
                m.beat()
            return len(a.running | b.running | c.running) == 5
        wait_until(fell_back, 10, "the coordinator's own target")
        assert thread.call(lambda: group.failed_leader) == a.member_id
