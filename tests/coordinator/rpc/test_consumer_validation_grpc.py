"""GroupHeartbeat's request validation and error codes over a real gRPC server on loopback, one row per
case, set against Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid and consumerGroupHeartbeat
(GroupMetadataManagerTest.testConsumerHeartbeatRequestValidation and its neighbours); where we answer
otherwise, docs/protocol2.md ("Where we differ from Kafka") says why. And the group's assignor, the
one most of its members name, seen by DescribeGroup as members join, rename and leave."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.zookeeper_server import wait_until

G = "g"
INTERVAL_MS = 3_000
MAX_SIZE = 3


@dataclass
class Server:
    server: ServerThread
    clock: FakeClock
    stub: pb_grpc.GroupCoordinatorStub
    admin: pb_grpc.GroupAdminStub

    def send(self, **fields: Any) -> pb.GroupHeartbeatResponse:
        fields.setdefault("group_id", G)
        answer: pb.GroupHeartbeatResponse = self.stub.GroupHeartbeat(pb.GroupHeartbeatRequest(**fields), timeout=15)
        return answer

    def join(self, group_id: str = G, **fields: Any) -> pb.GroupHeartbeatResponse:
        answer = self.send(group_id=group_id, member_epoch=0, session_timeout_ms=6_000, **fields)
        assert answer.error.code == pb.NONE, answer.error.message
        return answer

    def advance(self, seconds: float) -> None:
        runtime = self.server.runtime
        self.server.call(lambda: (self.clock.advance(seconds), runtime.poll_timers()))

    def describe(self, group_id: str) -> pb.DescribeGroupResponse:
        answer: pb.DescribeGroupResponse = self.admin.DescribeGroup(pb.DescribeGroupRequest(group_id=group_id),
                                                                    timeout=15)
        return answer

    def settled(self, group_id: str) -> None:
        """Wait (bounded) until the group's target is computed for its epoch (off the loop)."""
        def done() -> bool:
            self.advance(0.2)
            now = self.describe(group_id)
            return now.target_epoch == now.group_epoch
        wait_until(done, 20, f"group {group_id}'s target")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """One server for every row: each row makes the members it needs (rows never share a member)."""
    clock = FakeClock()
    config = CoordinatorConfig(consumer_heartbeat_interval_ms=INTERVAL_MS, group_max_size=MAX_SIZE)
    runtime = CoordinatorRuntime(config, clock=clock, on_change=lambda group: group.validate())
    with ServerThread(runtime) as thread, grpc.insecure_channel(thread.address) as channel:
        yield Server(thread, clock, pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel))


def member(s: Server, g: str, **fields: Any) -> dict[str, Any]:
    """A fresh member of group ``g``: the fields that name it in its next heartbeat."""
    joined = s.join(g, **fields)
    return {"group_id": g, "member_id": joined.member_id, "member_epoch": joined.member_epoch}


def moved(s: Server, g: str) -> tuple[dict[str, Any], int]:
    """A member that moved from epoch 1 to a later one (a second member joined): its fields at its
    current epoch, and that epoch's previous one."""
    first = member(s, g)
    s.join(g)
    s.settled(g)
    now = s.send(**first)
    assert now.error.code == pb.NONE and now.member_epoch > first["member_epoch"], now
    return {**first, "member_epoch": now.member_epoch}, first["member_epoch"]


def behind(s: Server, g: str) -> dict[str, Any]:
    now, before = moved(s, g)
    assert now["member_epoch"] - 1 > before  # neither its epoch nor its previous one
    return {**now, "member_epoch": now["member_epoch"] - 1}


def previous(s: Server, g: str, **fields: Any) -> dict[str, Any]:
    now, before = moved(s, g)
    return {**now, "member_epoch": before, **fields}


def full_group(s: Server, g: str) -> dict[str, Any]:
    for _ in range(MAX_SIZE):
        s.join(g)
    return {"group_id": g, "member_epoch": 0}


def static_away(s: Server, g: str) -> dict[str, Any]:
    return {**member(s, g, instance_id=f"i-{g}"), "member_epoch": -2, "instance_id": f"i-{g}"}


Row = Callable[[Server, str], dict[str, Any]]
TASK = pb.TaskReplicaList(tasks=[pb.TaskReplica(task_id="t", replica=0)])
# (case, the request's fields given the server and a group id of the row's own, the code, a word of the
# message); Kafka's answer in the comment above each
ROWS: list[tuple[str, Row, int, str]] = [
    # Kafka: INVALID_REQUEST "GroupId can't be empty." (blank too)
    ("empty group id", lambda s, g: {"group_id": "", "member_epoch": 0}, pb.INVALID_REQUEST, "group_id"),
    ("blank group id", lambda s, g: {"group_id": "   ", "member_epoch": 0}, pb.INVALID_REQUEST, "group_id"),
    # Kafka has no such rule; ours for every RPC (ids become ZooKeeper paths)
    ("group id with a slash", lambda s, g: {"group_id": "a/b", "member_epoch": 0}, pb.INVALID_GROUP_ID, "'/'"),
    # Kafka: INVALID_REQUEST "InstanceId can't be empty."
    ("empty instance id", lambda s, g: {"member_id": "m", "member_epoch": 1, "instance_id": ""},
     pb.INVALID_REQUEST, "instance_id"),
    # Kafka: INVALID_REQUEST "MemberId can't be empty." for epoch > 0, -1 and -2
    ("heartbeat without member id", lambda s, g: {"member_epoch": 1}, pb.INVALID_REQUEST, "member_id"),
    ("leave without member id", lambda s, g: {"member_epoch": -1}, pb.INVALID_REQUEST, "member_id"),
    ("static leave without member id", lambda s, g: {"member_epoch": -2, "instance_id": "i"}, pb.INVALID_REQUEST,
     "member_id"),
    # Kafka: INVALID_REQUEST "InstanceId can't be null."
    ("static leave without instance id", lambda s, g: {"member_id": "m", "member_epoch": -2}, pb.INVALID_REQUEST,
     "instance_id"),
    # Kafka: INVALID_REQUEST "MemberEpoch is invalid."
    ("epoch below -2", lambda s, g: {"member_id": "m", "member_epoch": -3}, pb.INVALID_REQUEST, "member_epoch"),
    # Kafka: INVALID_REQUEST "TopicPartitions must be empty when (re-)joining."
    ("join owning tasks", lambda s, g: {"member_epoch": 0, "owned": TASK}, pb.INVALID_REQUEST, "owned"),
    # Kafka: UNSUPPORTED_ASSIGNOR on any request naming an unknown one, before the group is looked up
    ("join naming an unknown assignor", lambda s, g: {"group_id": g, "member_epoch": 0, "assignor": "nope"},
     pb.UNSUPPORTED_ASSIGNOR, "nope"),
    ("heartbeat naming an unknown assignor", lambda s, g: {**member(s, g), "assignor": "nope"},
     pb.UNSUPPORTED_ASSIGNOR, "sticky"),
    ("unknown assignor before an unknown member",
     lambda s, g: {"group_id": g, "member_id": "ghost", "member_epoch": 4, "assignor": "nope"},
     pb.UNSUPPORTED_ASSIGNOR, "nope"),
    # Kafka: UNKNOWN_MEMBER_ID
    ("unknown member id", lambda s, g: {**member(s, g), "member_id": "ghost"}, pb.UNKNOWN_MEMBER_ID, "ghost"),
    ("leave of an unknown member", lambda s, g: {**member(s, g), "member_id": "ghost", "member_epoch": -1},
     pb.UNKNOWN_MEMBER_ID, "ghost"),
    # Kafka: GROUP_ID_NOT_FOUND; ours UNKNOWN_MEMBER_ID (the member joins again; docs/protocol2.md)
    ("heartbeat to no group", lambda s, g: {"group_id": g, "member_id": "m", "member_epoch": 2},
     pb.UNKNOWN_MEMBER_ID, "is not in group"),
    # Kafka: FENCED_MEMBER_EPOCH ahead, behind, or at the previous epoch without owned (a subset: accepted)
    ("epoch ahead", lambda s, g: {**member(s, g), "member_epoch": 9}, pb.FENCED_MEMBER_EPOCH, "epoch 0"),
    ("epoch behind", behind, pb.FENCED_MEMBER_EPOCH, "epoch 0"),
    ("previous epoch without owned", lambda s, g: previous(s, g), pb.FENCED_MEMBER_EPOCH, "epoch 0"),
    ("previous epoch owning a subset", lambda s, g: previous(s, g, owned=pb.TaskReplicaList()), pb.NONE, ""),
    # Kafka: GROUP_MAX_SIZE_REACHED for a new member of a full group
    ("join to a full group", full_group, pb.GROUP_MAX_SIZE_REACHED, "group_max_size"),
    # Kafka: bounded by group.consumer.min/max.session.timeout.ms (ours names the key)
    ("session timeout below the minimum", lambda s, g: {"group_id": g, "member_epoch": 0, "session_timeout_ms": 5},
     pb.INVALID_SESSION_TIMEOUT, "group_min_session_timeout_ms"),
    ("rebalance timeout zero", lambda s, g: {"group_id": g, "member_epoch": 0, "rebalance_timeout_ms": 0},
     pb.INVALID_REQUEST, "rebalance_timeout_ms"),
    # accepted, each answer with the coordinator's heartbeat interval
    ("join with no timeouts (Kafka: rebalance timeout required)", lambda s, g: {"group_id": g, "member_epoch": 0},
     pb.NONE, ""),
    ("join owning nothing", lambda s, g: {"group_id": g, "member_epoch": 0, "owned": pb.TaskReplicaList()},
     pb.NONE, ""),
    ("join naming a leader-side assignor",
     lambda s, g: {"group_id": g, "member_epoch": 0, "assignor": "client:anything"}, pb.NONE, ""),
    ("heartbeat", member, pb.NONE, ""),
    # Kafka since KAFKA-19233 (2026): a fenced member may join again with epoch 0 under its id
    ("join again under its member id", lambda s, g: {**member(s, g), "member_epoch": 0}, pb.NONE, ""),
    ("leave", lambda s, g: {**member(s, g), "member_epoch": -1}, pb.NONE, ""),
    ("static leave", static_away, pb.NONE, ""),
]


@pytest.mark.parametrize(("case", "fields", "code", "word"), ROWS, ids=[row[0] for row in ROWS])
def test_each_bad_request_gets_kafkas_code_and_a_message_naming_the_field(
        server: Server, case: str, fields: Row, code: int, word: str) -> None:
    answer = server.send(**fields(server, f"g-{[row[0] for row in ROWS].index(case)}"))
    assert answer.error.code == code, f"{case}: {answer.error.code} {answer.error.message}"
    assert word in answer.error.message, answer.error.message
    if code == pb.NONE:
        assert answer.heartbeat_interval_ms == INTERVAL_MS and answer.member_id
    else:
        assert answer.error.message and not answer.member_id


def test_a_join_answers_its_assignment_and_the_epoch_it_holds(server: Server) -> None:
    """Kafka's testMemberIdGeneration / testConsumerGroupHeartbeatFullResponse: a join's answer carries a
    member id, epoch 1 and an assignment (empty before the group's first target); a later heartbeat
    whose tasks are unchanged carries none (its epoch may have moved: our target is computed off the loop)."""
    joined = server.join(group_id="fresh")
    assert joined.member_id and joined.member_epoch == 1 and joined.HasField("assignment")
    quiet = server.send(group_id="fresh", member_id=joined.member_id, member_epoch=1)
    assert quiet.error.code == pb.NONE and quiet.member_epoch >= 1 and not quiet.HasField("assignment")


def test_the_group_runs_the_assignor_most_members_name(server: Server) -> None:
    group = "choice"
    a = server.join(group, assignor="round-robin")
    b = server.join(group, assignor="sticky")
    assert server.describe(group).protocol == "round-robin"  # a tie keeps the group's
    epoch = server.describe(group).group_epoch
    server.join(group, assignor="sticky")
    after = server.describe(group)
    assert after.protocol == "sticky" and after.group_epoch == epoch + 1
    server.settled(group)
    renamed = server.send(group_id=group, member_id=b.member_id, member_epoch=b.member_epoch, assignor="round-robin")
    assert renamed.error.code == pb.NONE and server.describe(group).protocol == "round-robin"  # 2 against 1
    left = server.send(group_id=group, member_id=a.member_id, member_epoch=-1)
    assert left.error.code == pb.NONE and server.describe(group).protocol == "round-robin"  # 1 against 1: kept
    server.settled(group)
    assert len(server.describe(group).members) == 2
