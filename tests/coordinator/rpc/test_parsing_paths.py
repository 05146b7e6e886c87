"""Both parsing paths of ``coordinator.rpc.parsing``, over real gRPC: small requests by their
deserializer (no interceptor on a plain server), large ones by the handler or, when other
interceptors run, by the ``ParsingInterceptor`` first in the chain; bad bytes are INVALID_ARGUMENT
either way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.rpc import parsing
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc


class Seen(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A pass-through interceptor that records the type of each request it sees."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary

        async def look(request: Any, context: Any) -> Any:
            self.requests.append(type(request).__name__)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(look, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


@pytest.mark.parametrize("intercepted", [False, True], ids=["plain", "with-interceptor"])
def test_requests_are_parsed_on_either_path(intercepted: bool) -> None:
    seen = Seen()
    with ServerThread(interceptors=[seen] if intercepted else None) as server, \
            grpc.insecure_channel(server.address) as channel:
        stub, admin = pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)
        assert admin.PutTasks(pb.PutTasksRequest(group_id="g", tasks=[pb.Task(task_id="t")])).num_tasks == 1
        beat = stub.Heartbeat(pb.HeartbeatRequest(group_id="g", member_id="nobody", generation=1))
        assert beat.error.code == pb.UNKNOWN_MEMBER_ID
        for method in ("/groupcoord.v1.GroupCoordinator/Heartbeat", "/groupcoord.v1.GroupAdmin/PutTasks"):
            raw = channel.unary_unary(method)
            with pytest.raises(grpc.RpcError) as failure:
                raw(b"\xff\xff\xff", timeout=10)
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "is not a valid" in (failure.value.details() or "")
        # a heartbeat far larger than its ids can make it is refused unparsed
        huge = pb.HeartbeatRequest(group_id="g", member_id="m" * (parsing.SMALL_REQUEST_MAX_BYTES + 1))
        with pytest.raises(grpc.RpcError) as failure:
            stub.Heartbeat(huge, timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"at most {parsing.SMALL_REQUEST_MAX_BYTES}" in (failure.value.details() or "")
    if intercepted:  # the interceptor after the parsing one saw messages, never bytes
        assert "PutTasksRequest" in seen.requests and "HeartbeatRequest" in seen.requests
        assert "bytes" not in seen.requests


def test_only_requests_that_can_be_large_go_through_the_parsing_interceptor() -> None:
    assert "/groupcoord.v1.GroupAdmin/PutTasks" in parsing.request_parsers()
    assert "/groupcoord.v1.GroupCoordinator/SyncGroup" in parsing.request_parsers()
    assert "/groupcoord.v1.GroupCoordinator/Heartbeat" not in parsing.request_parsers()
