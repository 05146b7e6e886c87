"""gRPC servicers: translate RPCs into calls on the GroupCoordinator model.

All calls run on the server's event loop thread, so the model needs no locks.
Held requests (JoinGroup, SyncGroup) wait on a future the model completes.
An unexpected exception is logged with its traceback and answered with gRPC
INTERNAL; the model's own errors travel in-band as ErrorCodes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Awaitable, Callable, TypeVar

import grpc
from google.protobuf.message import DecodeError

from coordinator.coordinator import GroupCoordinator
from coordinator.store import FencedError, StoreError
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

__all__ = ["CoordinatorServicer", "AdminServicer", "add_servicer"]

log = logging.getLogger("groupcoord.service")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class Malformed:
    """Stands in for a request whose bytes did not parse (answered with INVALID_ARGUMENT)."""

    def __init__(self, type_name: str, error: str) -> None:
        self.description = f"request is not a valid {type_name}: {error}"


def _lenient_parser(message_class: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError as error:
            return Malformed(message_class.DESCRIPTOR.full_name, str(error))

    return parse


def add_servicer(server: grpc.aio.Server, service_name: str, servicer: Any) -> None:
    """Register ``servicer`` for ``service_name`` with parsers that turn bad bytes into INVALID_ARGUMENT
    (the generated registration would answer UNKNOWN and log a traceback)."""
    service = pb.DESCRIPTOR.services_by_name[service_name]
    handlers = {
        method.name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method.name),
            request_deserializer=_lenient_parser(getattr(pb, method.input_type.name)),
            response_serializer=lambda message: message.SerializeToString(),
        )
        for method in service.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))


def _guarded(method: F) -> F:
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.description)
        try:
            return await method(self, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except FencedError as fenced:
            log.warning("lost leadership while answering %s: %s", method.__name__, fenced)
            self.coordinator.unload("")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "this coordinator lost its leadership; rediscover")
        except StoreError as error:
            log.error("%s: store write failed: %s", method.__name__, error)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the coordinator's store failed: {error}")
        except Exception:
            log.exception("%s failed on %s", method.__name__, type(request).__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__}: internal error (see coordinator log)")

    return wrapper  # type: ignore[return-value]


def _peer_host(context: grpc.aio.ServicerContext) -> str:
    peer = context.peer() or ""
    # "ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555" -> the address without the port
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


async def _held(start: Callable[[Callable[[Any], None]], None]) -> Any:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def reply(response: Any) -> None:
        if not future.done():
            future.set_result(response)

    start(reply)
    return await future


class CoordinatorServicer(pb_grpc.GroupCoordinatorServicer):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    @_guarded
    async def JoinGroup(self, request: pb.JoinGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        host = _peer_host(context)
        return await _held(lambda reply: self.coordinator.join_group(request, reply, host=host))

    @_guarded
    async def SyncGroup(self, request: pb.SyncGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        return await _held(lambda reply: self.coordinator.sync_group(request, reply))

    @_guarded
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.heartbeat(request)

    @_guarded
    async def LeaveGroup(self, request: pb.LeaveGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.leave_group(request)

    @_guarded
    async def ReportLoad(self, request: pb.ReportLoadRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.report_load(request)


class AdminServicer(pb_grpc.GroupAdminServicer):
    def __init__(self, coordinator: GroupCoordinator) -> None:
        self.coordinator = coordinator

    @_guarded
    async def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.list_groups()

    @_guarded
    async def DescribeGroup(self, request: pb.DescribeGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.describe_group(request.group_id, include_load_snapshot=request.include_load_snapshot)

    @_guarded
    async def PutTasks(self, request: pb.PutTasksRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.put_tasks(request)

    @_guarded
    async def DeleteTasks(self, request: pb.DeleteTasksRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.delete_tasks(request)

    @_guarded
    async def PublishLoadSnapshot(
        self, request: pb.PublishLoadSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return self.coordinator.publish_load_snapshot(request)

    @_guarded
    async def DeleteGroup(self, request: pb.DeleteGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.coordinator.delete_group(request)
