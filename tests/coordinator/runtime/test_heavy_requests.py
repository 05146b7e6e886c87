"""Heavy requests do their heavy work off the event loop, and get the same answers as on it.

Each heavy step (checking a PutTasks' catalog, checking a leader's assignment, copying a large
catalog into an answer) is held at a gate on its thread while the test shows that another
group's heartbeat is answered meanwhile; then the gate opens and the request completes with the
right answer. The steps are the real ones, wrapped; nothing is replaced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import answers, prechecks
from groupcoord.coordinator.model.assignment_check import check_assignment
from groupcoord.coordinator.model.prechecks import check_catalog
from groupcoord.coordinator.model.records import finish_record, group_from_record, group_to_record
from groupcoord.coordinator.rpc import parsing, service
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

TASKS = 5_000  # enough to cross the off-loop threshold of a leader's assignment (1,000 replicas)


class Gate:
    """Wraps a function so that calls from a thread other than ``free`` wait until ``open()``."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self._open = threading.Event()
        self.threads: list[str] = []

    def __call__(self, *args: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self._open.wait(30), "the test never opened the gate"
        return self.inner(*args)

    def open(self) -> None:
        self._open.set()


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0))) as running:
        yield running


def _member(stub: pb_grpc.GroupCoordinatorStub, group: str) -> pb.JoinGroupResponse:
    request = pb.JoinGroupRequest(group_id=group, client_id="w", session_timeout_ms=30_000,
                                  rebalance_timeout_ms=30_000, protocols=["round-robin"])
    request.member_id = stub.JoinGroup(request, timeout=10).member_id
    joined: pb.JoinGroupResponse = stub.JoinGroup(request, timeout=10)
    assert joined.error.code == pb.NONE, joined.error
    return joined


def _stable_probe(stub: pb_grpc.GroupCoordinatorStub) -> pb.HeartbeatRequest:
    joined = _member(stub, "probe")
    synced = stub.SyncGroup(pb.SyncGroupRequest(group_id="probe", member_id=joined.member_id,
                                                generation=joined.generation), timeout=10)
    assert synced.error.code == pb.NONE
    return pb.HeartbeatRequest(group_id="probe", member_id=joined.member_id, generation=joined.generation)


def _heartbeat_answered(stub: pb_grpc.GroupCoordinatorStub, beat: pb.HeartbeatRequest) -> None:
    assert stub.Heartbeat(beat, timeout=5).error.code == pb.NONE


def _catalog(n: int, weight: float = 1.0) -> list[pb.Task]:
    return [pb.Task(task_id=f"t{i:05d}", weight=weight) for i in range(n)]


def test_a_large_put_tasks_is_checked_off_the_loop(server: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(prechecks.check_catalog)
    monkeypatch.setattr(prechecks, "check_catalog", gate)
    with grpc.insecure_channel(server.address) as channel:
        stub, admin = pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)
        beat = _stable_probe(stub)
        put: Future[Any] = admin.PutTasks.future(pb.PutTasksRequest(group_id="big", tasks=_catalog(TASKS)), timeout=30)
        assert gate.entered.wait(10)
        _heartbeat_answered(stub, beat)  # the loop is free while the catalog is checked
        assert not put.done()
        gate.open()
        assert put.result(timeout=30).num_tasks == TASKS
        assert all(name.startswith("groupcoord-check") for name in gate.threads), gate.threads
        # a bad catalog is still refused, from the checker thread, and changes nothing
        bad = _catalog(3) + [pb.Task(task_id="t00001")]
        refused = admin.PutTasks(pb.PutTasksRequest(group_id="big", tasks=bad), timeout=30)
        assert refused.error.code == pb.DUPLICATE_TASK
        described = admin.DescribeGroup(pb.DescribeGroupRequest(group_id="big"), timeout=30)
        assert len(described.tasks) == TASKS


def test_a_leaders_large_assignment_is_checked_off_the_loop(server: ServerThread,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(check_assignment)
    monkeypatch.setattr(service, "check_assignment", gate)
    with grpc.insecure_channel(server.address) as channel:
        stub, admin = pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)
        beat = _stable_probe(stub)
        admin.PutTasks(pb.PutTasksRequest(group_id="big", tasks=_catalog(TASKS)), timeout=30)
        leader = _member(stub, "big")
        assert len(leader.tasks) == TASKS  # the leader's answer carries the whole catalog, in order
        assert [t.task_id for t in leader.tasks] == sorted(t.task_id for t in leader.tasks)
        assignment = pb.MemberAssignment(member_id=leader.member_id, user_data=b"hi", tasks=[
            pb.TaskReplica(task_id=t.task_id) for t in leader.tasks])
        sync = pb.SyncGroupRequest(group_id="big", member_id=leader.member_id, generation=leader.generation,
                                   assignments=[assignment])
        synced: Future[Any] = stub.SyncGroup.future(sync, timeout=30)
        assert gate.entered.wait(10)
        _heartbeat_answered(stub, beat)
        assert not synced.done()
        gate.open()
        answer = synced.result(timeout=30)
        assert answer.error.code == pb.NONE and answer.user_data == b"hi"
        assert [r.task_id for r in answer.tasks] == [t.task_id for t in leader.tasks]
        described = admin.DescribeGroup(pb.DescribeGroupRequest(group_id="big"), timeout=30)
        assert described.state == pb.STABLE and len(described.members[0].assigned) == TASKS


def test_large_answers_are_completed_off_the_loop(server: ServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(answers.add_catalog)
    with grpc.insecure_channel(server.address) as channel:
        stub, admin = pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)
        beat = _stable_probe(stub)
        admin.PutTasks(pb.PutTasksRequest(group_id="big", tasks=_catalog(TASKS)), timeout=30)
        monkeypatch.setattr(answers, "add_catalog", gate)
        described: Future[Any] = admin.DescribeGroup.future(pb.DescribeGroupRequest(group_id="big"), timeout=30)
        assert gate.entered.wait(10)
        _heartbeat_answered(stub, beat)
        assert not described.done()
        gate.open()
        assert [t.task_id for t in described.result(timeout=30).tasks] == [f"t{i:05d}" for i in range(TASKS)]
        assert all(name.startswith("groupcoord-check") for name in gate.threads), gate.threads


def _awaiting_sync() -> tuple[Harness, str, str]:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h.put_tasks("g", "a", "b")
    leader, _ = h.join_new("g")
    other, _ = h.join_new("g")
    h.join("g", leader)
    assert h.state("g") == "AwaitingSync" and h.group("g").leader_id == leader
    return h, leader, other


def _sync(h: Harness, leader: str, other: str, tasks_of_other: list[str]) -> pb.SyncGroupRequest:
    return pb.SyncGroupRequest(group_id="g", member_id=leader, generation=h.group("g").generation, assignments=[
        pb.MemberAssignment(member_id=leader, tasks=[pb.TaskReplica(task_id="a")]),
        pb.MemberAssignment(member_id=other, tasks=[pb.TaskReplica(task_id=t) for t in tasks_of_other])])


def test_the_model_takes_a_verdict_that_still_fits() -> None:
    """The verdict is what decides when the group is as it was checked (here a verdict on a request
    that left task b out, handed in with a complete one: refused with the verdict's reason)."""
    h, leader, other = _awaiting_sync()
    incomplete = _sync(h, leader, other, [])
    inputs = h.model.assignment_inputs(incomplete)
    assert inputs is not None
    verdict = check_assignment(h.model.config, inputs, incomplete)
    assert "'b'" in verdict.rejected and verdict.fits(h.group("g"))
    answer = h.run(lambda token: h.model.sync(_sync(h, leader, other, ["b"]), token, verdict), pb.SyncGroupResponse)
    assert answer.code == pb.INVALID_ASSIGNMENT and "'b'" in answer.response.error.message


def test_a_verdict_on_a_group_that_changed_meanwhile_is_not_used() -> None:
    """Checked against generation 2; a member left before the verdict came back: it no longer
    fits, and the leader's SyncGroup is judged on the group as it is (rebalancing now)."""
    h, leader, other = _awaiting_sync()
    request = _sync(h, leader, other, ["b"])
    inputs = h.model.assignment_inputs(request)
    assert inputs is not None
    verdict = check_assignment(h.model.config, inputs, request)
    assert not verdict.rejected and verdict.fits(h.group("g"))
    h.leave("g", other)
    assert not verdict.fits(h.group("g"))
    answer = h.run(lambda token: h.model.sync(request, token, verdict), pb.SyncGroupResponse)
    assert answer.code == pb.REBALANCE_IN_PROGRESS
    assert h.group("g").assignment.get(other) is None


def test_catalog_check_compares_with_the_catalog_it_was_given() -> None:
    h = Harness()
    h.put_tasks("g", "a", "b")
    base = h.group("g").catalog_snapshot()
    tasks = [pb.Task(task_id="a", replicas=1), pb.Task(task_id="b", weight=2.0), pb.Task(task_id="c")]
    checked = check_catalog(h.model.config, tasks, base)
    assert [t.task_id for t in checked.changed] == ["b", "c"] and checked.new == 1
    assert all(t.replicas == 1 for t in checked.tasks)  # 0 replicas is kept as 1
    h.admin("put_tasks", pb.PutTasksRequest(group_id="g", tasks=[pb.Task(task_id="z")]))  # the catalog moves on
    stale = h.run(lambda token: h.model.put_tasks(pb.PutTasksRequest(group_id="g", tasks=tasks), token, checked),
                  pb.PutTasksResponse)
    assert stale.response.num_tasks == 4  # a, b, c and z: compared again with the catalog as it is
    assert h.group("g").tasks["b"].weight == 2.0


def test_a_drafted_record_finishes_into_the_stored_form() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    h.put_tasks("g", "a", "b", replicas=2)
    member, _ = h.join_new("g")
    h.join("g", member)
    h.sync("g", member, h.group("g").generation, {member: ["a", "b"]})
    draft = group_to_record(h.group("g"))
    record = finish_record(draft)
    assert finish_record(record) == record  # finishing is idempotent
    assert record["tasks"] == group_to_record(group_from_record(record))["tasks"].serialised()
    again = group_from_record(record)
    assert again.tasks == h.group("g").tasks and again.assignment == h.group("g").assignment


def _gate_put_tasks_parsing(monkeypatch: pytest.MonkeyPatch) -> list[Gate]:
    """Large PutTasks requests wait at a gate while being parsed (the first one, at least)."""
    gates: list[Gate] = []
    lenient = parsing.lenient_parser

    def gated_parser(message_class: Any) -> Callable[[bytes], Any]:
        parse = lenient(message_class)
        if message_class is not pb.PutTasksRequest:
            return parse
        gate = Gate(parse)
        gates.append(gate)
        return lambda data: gate(data) if len(data) >= parsing.PARSE_OFF_LOOP_FROM else parse(data)

    monkeypatch.setattr(parsing, "lenient_parser", gated_parser)
    return gates


def test_a_large_request_is_parsed_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    gates = _gate_put_tasks_parsing(monkeypatch)
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    with ServerThread(CoordinatorRuntime(config)) as server, grpc.insecure_channel(server.address) as channel:
        stub, admin = pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)
        beat = _stable_probe(stub)
        request = pb.PutTasksRequest(group_id="big", tasks=_catalog(20_000))
        assert request.ByteSize() >= parsing.PARSE_OFF_LOOP_FROM
        put: Future[Any] = admin.PutTasks.future(request, timeout=30)
        (gate,) = gates
        assert gate.entered.wait(10)
        _heartbeat_answered(stub, beat)
        gate.open()
        assert put.result(timeout=30).num_tasks == 20_000
        assert gate.threads and all(t.startswith("groupcoord-check") for t in gate.threads), gate.threads
        # bad bytes, large or small, are still INVALID_ARGUMENT
        raw = channel.unary_unary("/groupcoord.v1.GroupAdmin/PutTasks")
        for junk in (b"\xff\xff\xff", b"\x0a\xff\xff\xff\x0f" + b"\x00" * parsing.PARSE_OFF_LOOP_FROM):
            with pytest.raises(grpc.RpcError) as failure:
                raw(junk, timeout=10)
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_large_requests_in_flight_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """One large request holds the whole budget while it is parsed: the next is refused at once
    (RESOURCE_EXHAUSTED, retriable) and changes nothing; once the first is done, it goes through."""
    gates = _gate_put_tasks_parsing(monkeypatch)
    limit = 600_000
    config = CoordinatorConfig(max_message_bytes=limit, max_request_bytes_in_flight=limit)
    with ServerThread(CoordinatorRuntime(config)) as server, grpc.insecure_channel(server.address) as channel:
        admin = pb_grpc.GroupAdminStub(channel)
        first = pb.PutTasksRequest(group_id="a", tasks=_catalog(20_000))
        assert parsing.PARSE_OFF_LOOP_FROM <= first.ByteSize() < limit < 2 * first.ByteSize()
        held: Future[Any] = admin.PutTasks.future(first, timeout=30)
        (gate,) = gates
        assert gate.entered.wait(10)
        second = pb.PutTasksRequest(group_id="b", tasks=_catalog(20_000))
        with pytest.raises(grpc.RpcError) as refused:
            admin.PutTasks(second, timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_request_bytes_in_flight" in (refused.value.details() or "")
        gate.open()
        assert held.result(timeout=30).num_tasks == 20_000
        assert admin.PutTasks(second, timeout=30).num_tasks == 20_000  # the budget came back
