"""``worker.calls``, the part of a call both transports share: which member an error names, and what an
answer, a broken stream or a failed unary call does to the route (a real ``worker.lookup.Route``)."""

from __future__ import annotations

import grpc
import pytest

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import calls
from groupcoord.worker.lookup import Route
from groupcoord.worker.stream_tags import StreamBroken
from tests.worker.rpc_failure import RpcFailure


def route(group: bool = True) -> Route:
    """With ``group`` the coordinator is looked up (FindCoordinator); without, the addresses are used in turn."""
    found = Route(["10.0.0.1:9", "10.0.0.2:9"])
    found.enabled = group
    return found


def refused(code: int, **fields: str) -> pb.Error:
    return pb.Error(code=code, message="refused", **fields)


def test_a_join_s_error_names_the_id_the_coordinator_gave_and_describe_names_none() -> None:
    request = pb.JoinGroupRequest(group_id="g")
    with pytest.raises(errors.MemberIdRequiredError) as raised:
        calls.settle(calls.JOIN_GROUP, request, pb.JoinGroupResponse(
            error=refused(pb.MEMBER_ID_REQUIRED), member_id="m-given"), route())
    assert raised.value.member_id == "m-given"
    with pytest.raises(errors.UnknownMemberIdError) as unknown:
        calls.settle(calls.HEARTBEAT, pb.HeartbeatRequest(member_id="m-1"), pb.HeartbeatResponse(
            error=refused(pb.UNKNOWN_MEMBER_ID)), route())
    assert unknown.value.member_id == "m-1"
    with pytest.raises(errors.GroupCoordError) as described:
        calls.settle(calls.DESCRIBE_GROUP, pb.DescribeGroupRequest(group_id="g"), pb.DescribeGroupResponse(
            error=refused(pb.GROUP_ID_NOT_FOUND)), route())
    assert described.value.member_id == ""
    assert calls.DESCRIBE_GROUP.admin and not calls.GROUP_HEARTBEAT.admin


def test_an_answer_passes_and_a_moved_coordinator_moves_the_route_to_its_hint() -> None:
    answered = pb.SyncGroupResponse(generation=3)
    assert calls.settle(calls.SYNC_GROUP, pb.SyncGroupRequest(member_id="m"), answered, route()) is answered
    moving = route()
    with pytest.raises(errors.NotCoordinatorError):
        calls.settle(calls.SYNC_GROUP, pb.SyncGroupRequest(member_id="m"), pb.SyncGroupResponse(
            error=refused(pb.NOT_COORDINATOR, coordinator_hint="10.0.0.2:9")), moving)
    assert moving.address == "10.0.0.2:9"


def test_a_failed_call_is_unavailable_and_moves_on_or_is_fatal_and_stays() -> None:
    moving = route(group=False)
    failure = calls.unary_failed(moving, "Heartbeat", moving.address, RpcFailure(grpc.StatusCode.UNAVAILABLE))
    assert isinstance(failure, errors.CoordinatorNotAvailableError)
    assert str(failure) == "COORDINATOR_NOT_AVAILABLE: Heartbeat to 10.0.0.1:9 failed: UNAVAILABLE said no"
    assert moving.address == "10.0.0.2:9"
    staying = route(group=False)
    denied = calls.unary_failed(staying, "Heartbeat", staying.address, RpcFailure(grpc.StatusCode.PERMISSION_DENIED))
    assert isinstance(denied, errors.NotAuthorizedError) and staying.address == "10.0.0.1:9"
    broken = route(group=False)
    on_stream = calls.stream_failed(broken, "Heartbeat", broken.address, TimeoutError())
    assert isinstance(on_stream, errors.CoordinatorNotAvailableError) and "DEADLINE_EXCEEDED" in str(on_stream)
    assert broken.address == "10.0.0.2:9"
    assert "stream gone" in str(calls.stream_failed(broken, "Heartbeat", broken.address, StreamBroken("stream gone")))
