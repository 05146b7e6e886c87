"""The membership rules over real gRPC on loopback: raw stubs, as any client would speak them."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

G = "g"


@pytest.fixture
def stub() -> Iterator[pb_grpc.GroupCoordinatorStub]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               group_max_size=2)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as server, \
            grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.GroupCoordinatorStub(channel)


def join(stub: pb_grpc.GroupCoordinatorStub, member_id: str = "", **fields: Any) -> Future[Any]:
    request = pb.JoinGroupRequest(group_id=G, member_id=member_id, client_id="c", session_timeout_ms=10_000,
                                  rebalance_timeout_ms=10_000, protocols=["round-robin"], **fields)
    future: Future[Any] = stub.JoinGroup.future(request, timeout=15)
    return future


def test_static_member_restart_user_data_and_fencing_over_grpc(stub: pb_grpc.GroupCoordinatorStub) -> None:
    first = join(stub, instance_id="i-1", protocol_type="svc").result()
    assert first.error.code == pb.NONE and first.protocol_type == "svc" and first.generation == 1
    synced = stub.SyncGroup(pb.SyncGroupRequest(
        group_id=G, member_id=first.member_id, generation=1, protocol_type="svc", protocol_name="round-robin",
        assignments=[pb.MemberAssignment(member_id=first.member_id, user_data=b"leader-url=http://a:1")]), timeout=5)
    assert synced.error.code == pb.NONE and synced.user_data == b"leader-url=http://a:1"
    # another kind of group cannot join
    assert join(stub, protocol_type="other").result().error.code == pb.INCONSISTENT_GROUP_PROTOCOL
    # the process restarts: same instance, no member id
    again = join(stub, instance_id="i-1", protocol_type="svc").result()
    assert again.error.code == pb.NONE and again.generation == 1 and again.skip_assignment
    assert again.member_id != first.member_id
    beat = stub.Heartbeat(pb.HeartbeatRequest(group_id=G, member_id=first.member_id, generation=1,
                                              instance_id="i-1"), timeout=5)
    assert beat.error.code == pb.FENCED_INSTANCE_ID
    kept = stub.SyncGroup(pb.SyncGroupRequest(group_id=G, member_id=again.member_id, generation=1,
                                              instance_id="i-1"), timeout=5)
    assert kept.error.code == pb.NONE and kept.user_data == b"leader-url=http://a:1"


def test_batch_leave_and_max_size_over_grpc(stub: pb_grpc.GroupCoordinatorStub) -> None:
    a = join(stub, instance_id="a").result()
    assert a.error.code == pb.NONE
    b = join(stub, instance_id="b")  # parked until a re-joins
    assert join(stub, a.member_id, instance_id="a").result().error.code == pb.NONE
    assert b.result().error.code == pb.NONE
    firsts = [join(stub).result() for _ in range(3)]  # the group is full (2): refused at the first step
    assert [f.error.code for f in firsts] == [pb.GROUP_MAX_SIZE_REACHED] * 3
    left = stub.LeaveGroup(pb.LeaveGroupRequest(group_id=G, members=[
        pb.MemberIdentity(instance_id="a"), pb.MemberIdentity(instance_id="b"), pb.MemberIdentity(member_id="x")]),
        timeout=5)
    assert [m.error.code for m in left.members] == [pb.NONE, pb.NONE, pb.UNKNOWN_MEMBER_ID]
    assert [m.member_id for m in left.members][:2] == [a.member_id, b.result().member_id]
