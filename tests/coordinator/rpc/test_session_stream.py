"""The Session stream over a real gRPC server on loopback, spoken with a raw stub as any client would: the
same answers as the unary twins, tagged; news pushed at once; protocol violations end the stream clearly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.coordinator.rpc.session_client import RawSession

SESSION_MS = 10_000


@dataclass
class Coordinator:
    server: ServerThread
    channel: grpc.Channel
    clock: FakeClock
    unary: pb_grpc.GroupCoordinatorStub

    def session(self) -> RawSession:
        return RawSession(self.channel)

    def catalog(self, *group_ids: str) -> None:
        """Give each group one task, t1."""
        admin = pb_grpc.GroupAdminStub(self.channel)
        for group_id in group_ids:
            assert admin.PutTasks(pb.PutTasksRequest(group_id=group_id, tasks=[pb.Task(task_id="t1")]),
                                  timeout=10).error.code == pb.NONE

    def advance(self, seconds: float) -> None:
        runtime = self.server.runtime
        self.server.call(lambda: (self.clock.advance(seconds), runtime.poll_timers()))


@contextmanager
def serving(initial_rebalance_delay_ms: int = 0) -> Iterator[Coordinator]:
    """A coordinator on a fake clock; with a delay, joins wait that long on the clock for more members
    (a group's first rebalance), so a test forms its group in one go."""
    clock = FakeClock()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=initial_rebalance_delay_ms,
                               group_min_session_timeout_ms=200)
    runtime = CoordinatorRuntime(config, clock=clock, on_change=lambda group: group.validate())
    with ServerThread(runtime) as server, grpc.insecure_channel(server.address) as channel:
        yield Coordinator(server, channel, clock, pb_grpc.GroupCoordinatorStub(channel))


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    with serving() as coordinator:
        yield coordinator


def join_request(group_id: str, member_id: str = "", client_id: str = "w") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(group_id=group_id, member_id=member_id, client_id=client_id,
                               session_timeout_ms=SESSION_MS, rebalance_timeout_ms=SESSION_MS,
                               protocols=["round-robin"], protocol_type="svc")


def form_over_stream(session: RawSession, group_id: str) -> list[Any]:
    """A lone member's life over the stream: join twice, sync, heartbeat; every answer."""
    first = session.ask("join_group", join_request(group_id))
    joined = session.ask("join_group", join_request(group_id, first.member_id))
    synced = session.ask("sync_group", pb.SyncGroupRequest(
        group_id=group_id, member_id=joined.member_id, generation=joined.generation, protocol_type="svc",
        protocol_name="round-robin", assignments=[pb.MemberAssignment(
            member_id=joined.member_id, tasks=[pb.TaskReplica(task_id="t1")])]))
    beat = session.ask("heartbeat", pb.HeartbeatRequest(group_id=group_id, member_id=joined.member_id,
                                                        generation=joined.generation))
    return [first, joined, synced, beat]


def form_over_unary(stub: pb_grpc.GroupCoordinatorStub, group_id: str) -> list[Any]:
    first = stub.JoinGroup(join_request(group_id), timeout=10)
    joined = stub.JoinGroup(join_request(group_id, first.member_id), timeout=10)
    synced = stub.SyncGroup(pb.SyncGroupRequest(
        group_id=group_id, member_id=joined.member_id, generation=joined.generation, protocol_type="svc",
        protocol_name="round-robin", assignments=[pb.MemberAssignment(
            member_id=joined.member_id, tasks=[pb.TaskReplica(task_id="t1")])]), timeout=10)
    beat = stub.Heartbeat(pb.HeartbeatRequest(group_id=group_id, member_id=joined.member_id,
                                              generation=joined.generation), timeout=10)
    return [first, joined, synced, beat]


def without_ids(answers: list[Any]) -> list[Any]:
    """The answers with member ids (random suffixes) blanked, to compare a stream's with a unary call's."""
    out = []
    for answer in answers:
        copy = type(answer)()
        copy.CopyFrom(answer)
        for field in ("member_id", "leader_id"):
            if field in copy.DESCRIPTOR.fields_by_name:
                setattr(copy, field, "")
        for member in getattr(copy, "members", []):
            member.member_id = ""
        copy.error.message = copy.error.message.replace(answer.member_id, "<id>") if hasattr(answer, "member_id") \
            else copy.error.message
        out.append(copy)
    return out


def test_one_stream_forms_two_groups_with_the_answers_of_the_unary_calls(coordinator: Coordinator) -> None:
    coordinator.catalog("a", "b", "c")
    session = coordinator.session()
    on_stream = {g: form_over_stream(session, g) for g in ("a", "b")}
    on_unary = form_over_unary(coordinator.unary, "c")
    for group_id, answers in on_stream.items():
        codes = [a.error.code for a in answers]
        assert codes == [pb.MEMBER_ID_REQUIRED, pb.NONE, pb.NONE, pb.NONE], group_id
        assert answers[1].generation == 1 and answers[1].leader_id == answers[1].member_id
        assert [t.task_id for t in answers[2].tasks] == ["t1"]
        assert without_ids(answers) == without_ids(on_unary)
    states = coordinator.server.call(lambda: {g: grp.state.value for g, grp in coordinator.server.runtime.groups.items()})
    assert states == {"a": "Stable", "b": "Stable", "c": "Stable"}
    session.close()
    assert session.ended.wait(10) and session.status is None  # the client's half-close ends it with OK


def test_a_rebalance_is_pushed_to_a_member_that_does_not_heartbeat(coordinator: Coordinator) -> None:
    coordinator.catalog("g")
    session = coordinator.session()
    first = form_over_stream(session, "g")[1]
    assert session.has_news() == []
    second = coordinator.unary.JoinGroup.future(join_request("g", client_id="w2"), timeout=10).result()
    assert second.error.code == pb.MEMBER_ID_REQUIRED
    parked = coordinator.unary.JoinGroup.future(join_request("g", second.member_id, "w2"), timeout=10)
    [news] = session.news(1)  # without a heartbeat of its own
    assert news.WhichOneof("news") == "rebalance_started"
    assert (news.group_id, news.member_id, news.rebalance_started.generation) == ("g", first.member_id, 1)
    rejoined = session.ask("join_group", join_request("g", first.member_id))
    assert rejoined.error.code == pb.NONE and rejoined.generation == 2
    assert parked.result().generation == 2
    assert session.has_news() == []  # told once per rebalance


def test_answers_come_back_under_their_tags_out_of_order(coordinator: Coordinator) -> None:
    session = coordinator.session()
    first = session.ask("join_group", join_request("g"))
    parked = session.send("join_group", join_request("g", first.member_id))  # held until the phase ends ...
    beat = session.send("heartbeat", pb.HeartbeatRequest(group_id="h", member_id="nobody", generation=1))
    assert session.answer(beat).error.code == pb.UNKNOWN_MEMBER_ID  # ... while another is answered
    assert session.answer(parked).error.code == pb.NONE


@pytest.mark.parametrize(("message", "expected"), [
    (pb.SessionRequest(tag=0, heartbeat=pb.HeartbeatRequest(group_id="g")).SerializeToString(), "tag must not be 0"),
    (b"\xff\xff\xff\xff", "not a valid SessionRequest"),
])
def test_a_broken_envelope_ends_the_stream_with_invalid_argument(coordinator: Coordinator, message: bytes,
                                                                  expected: str) -> None:
    session = RawSession(coordinator.channel, raw=True)
    session.send_raw(message)
    assert session.ended_with() == grpc.StatusCode.INVALID_ARGUMENT
    assert session.status is not None and expected in (session.status.details() or "")


def test_a_tag_already_in_flight_ends_the_stream(coordinator: Coordinator) -> None:
    session = coordinator.session()
    first = form_over_stream(session, "g")[1]
    second = session.ask("join_group", join_request("g", client_id="w2"))
    assert second.error.code == pb.MEMBER_ID_REQUIRED
    # held until the first member joins again, which it never does here (the clock is fake): surely in flight
    session.send("join_group", join_request("g", second.member_id, "w2"), tag=7)
    session.send("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=first.member_id, generation=1), tag=7)
    assert session.ended_with() == grpc.StatusCode.INVALID_ARGUMENT
    assert session.status is not None and "tag 7 is already in flight" in (session.status.details() or "")


def test_a_body_the_coordinator_does_not_know_gets_an_empty_answer(coordinator: Coordinator) -> None:
    session = RawSession(coordinator.channel, raw=True)
    unknown_body = b"\x08\x05" + b"\xfa\x01\x02\x0a\x00"  # tag 5, field 31 (not a body this coordinator knows)
    session.send_raw(unknown_body)
    assert session.answer(5) is None
    session.send_raw(pb.SessionRequest(tag=6, heartbeat=pb.HeartbeatRequest(group_id="g")).SerializeToString())
    assert session.answer(6).error.code == pb.UNKNOWN_MEMBER_ID  # and the stream goes on


def test_consumer_members_hear_their_new_assignment_and_what_to_give_up(coordinator: Coordinator) -> None:
    admin = pb_grpc.GroupAdminStub(coordinator.channel)
    assert admin.PutTasks(pb.PutTasksRequest(group_id="c", tasks=[pb.Task(task_id=f"t{i}") for i in range(4)]),
                          timeout=10).error.code == pb.NONE
    server = coordinator.server

    def current() -> bool:
        group = server.runtime.model.consumer.groups["c"]
        return group.target_epoch == group.epoch and not group.computing

    def settled() -> None:
        for _ in range(100):
            coordinator.advance(0.2)
            if server.call(current):
                return
        raise AssertionError("the target did not settle")

    session = coordinator.session()
    joined = session.ask("group_heartbeat", pb.GroupHeartbeatRequest(group_id="c", member_epoch=0, client_id="a"))
    assert joined.error.code == pb.NONE
    settled()
    told = session.news(1)
    assert len(told) == 1, told
    [changed] = told  # its first target: told at once, not at its next heartbeat
    assert (changed.member_id, changed.WhichOneof("news")) == (joined.member_id, "assignment_changed")
    assert changed.assignment_changed.member_epoch >= joined.member_epoch
    got = session.ask("group_heartbeat", pb.GroupHeartbeatRequest(group_id="c", member_id=joined.member_id,
                                                                  member_epoch=joined.member_epoch))
    running = list(got.assignment.tasks)
    assert len(running) == 4
    session.ask("group_heartbeat", pb.GroupHeartbeatRequest(group_id="c", member_id=joined.member_id,
                                                            member_epoch=got.member_epoch,
                                                            owned=pb.TaskReplicaList(tasks=running)))
    other = coordinator.unary.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id="c", member_epoch=0, client_id="b"),
                                             timeout=10)  # a unary member of the same group
    assert other.error.code == pb.NONE
    settled()
    [give_up] = session.news(1)
    assert (give_up.member_id, give_up.WhichOneof("news")) == (joined.member_id, "tasks_to_give_up")
    assert len(give_up.tasks_to_give_up.tasks) == 2 and give_up.tasks_to_give_up.member_epoch == got.member_epoch


def test_a_stopping_coordinator_tells_every_member_to_look_again_then_ends_the_stream() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    server = ServerThread(CoordinatorRuntime(config)).start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            session = RawSession(channel)
            first = session.ask("join_group", join_request("g"))
            joined = session.ask("join_group", join_request("g", first.member_id))
            assert joined.error.code == pb.NONE
            server.stop()
            [moved] = session.news(1)
            assert (moved.member_id, moved.WhichOneof("news")) == (joined.member_id, "coordinator_moved")
            assert session.ended_with() == grpc.StatusCode.UNAVAILABLE
            assert session.status is not None and "stopping" in (session.status.details() or "")
    finally:
        server.stop()


def test_the_docs_example_runs() -> None:
    """docs/stream.md's snippet, as written, against a coordinator."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "stream.md").read_text()
    snippet = page.split("```python\n", 1)[1].split("```", 1)[0]
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    with ServerThread(CoordinatorRuntime(config)) as server:
        scope: dict[str, Any] = {}
        exec(snippet.replace("127.0.0.1:9400", server.address), scope)  # noqa: S102  # our own page's example
    assert scope["first"].tag == 1 and scope["first"].join_group.error.code == pb.MEMBER_ID_REQUIRED
    joined = scope["joined"]
    assert joined.tag == 2 and joined.join_group.error.code == pb.NONE and joined.join_group.generation == 1
