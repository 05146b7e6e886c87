"""How the worker reaches its coordinator: channel, stubs, deadlines, rediscovery, cancel, leave.

The state logic (``worker.client``) never sees gRPC: each call here returns the
response, or raises a ``groupcoord.errors`` class — the response's own error code
(``errors.raise_for``), or ``CoordinatorNotAvailableError`` for a transport failure
(the deadline passed, the address refused, the server failed). Both kinds of
"coordinator moved" (NOT_COORDINATOR with or without a hint, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, transport failures) first move the transport to the hinted
address or the next one of the configured list, so the caller's retry goes there.

``abort()`` (from any thread) cancels the call in flight and refuses new ones with
``WorkerClosedError``; ``leave_group`` still goes out afterwards, so a closing worker
can say goodbye.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord import errors
from groupcoord.channels import ClientSecurity, channel_options
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

__all__ = ["ChannelFactory", "CoordinatorList", "Transport", "WorkerClosedError", "describe_rpc_error",
           "failure_for_rpc_error", "failure_for_response"]

log = logging.getLogger("groupcoord.worker")

ChannelFactory = Callable[[str], grpc.Channel]

# protoc's gRPC plugin writes the stub classes without type hints: reach them as Any.
_CoordinatorStub: Any = pb_grpc.GroupCoordinatorStub
_AdminStub: Any = pb_grpc.GroupAdminStub

# Status codes that say "this coordinator, not this request": try again, elsewhere if there is one.
_TRANSPORT_RETRIABLE = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNIMPLEMENTED,
})


_ACCESS_DENIED: dict[Any, type[errors.AccessDenied]] = {
    grpc.StatusCode.UNAUTHENTICATED: errors.NotAuthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: errors.NotAuthorizedError,
}


class WorkerClosedError(RuntimeError):
    """The client was closed, or stopped on a fatal error (see ``fatal_error``)."""




class CoordinatorList:
    """Which coordinator the next call goes to: the configured list, in turn, and hints (both transports)."""

    def __init__(self, addresses: Sequence[str], *, name: str = "worker") -> None:
        if not addresses:
            raise ValueError("at least one coordinator address is needed")
        self._addresses = tuple(addresses)
        self._name = name
        self._index = 0
        self.address = self._addresses[0]

    def move(self, hint: str = "") -> bool:
        """Go to ``hint``, or to the address after the current one (wrapping around); True if it changed."""
        if hint:
            address = hint
        else:
            if self.address in self._addresses:  # reached through a hint: go on from there, not back to it
                self._index = self._addresses.index(self.address)
            self._index = (self._index + 1) % len(self._addresses)
            address = self._addresses[self._index]
        if address == self.address:
            return False
        log.info("%s: coordinator %s -> %s", self._name, self.address, address)
        self.address = address
        return True


def failure_for_rpc_error(method: str, address: str, rpc_error: grpc.RpcError) -> tuple[errors.GroupCoordError, bool]:
    """The error class for a failed call, and whether to move to the next coordinator first."""
    code = rpc_error.code() if hasattr(rpc_error, "code") else grpc.StatusCode.UNKNOWN
    message = f"{method} to {address} failed: {describe_rpc_error(rpc_error)}"
    if code in _TRANSPORT_RETRIABLE:
        return errors.CoordinatorNotAvailableError(message), True
    if code in _ACCESS_DENIED:  # fatal for the worker: credentials or ACLs must change
        return _ACCESS_DENIED[code](message), False
    return errors.InvalidRequestError(message), False


def failure_for_response(error: pb.Error, *, member_id: str = "") -> tuple[errors.GroupCoordError | None, str | None]:
    """The error of a response (None when NONE), and where to move first (None: stay; "": the next address)."""
    failure = errors.error_for(error, member_id=member_id)
    if isinstance(failure, errors.CoordinatorMovedError):
        return failure, failure.coordinator_hint
    return failure, None


class Transport:
    """The coordinator connection of one worker; used from the worker's thread (``abort`` from any)."""

    def __init__(
        self, addresses: Sequence[str], channel_factory: ChannelFactory | None = None, *, name: str = "worker",
        reconnect_backoff_max_ms: int = 1_000, security: ClientSecurity | None = None,
    ) -> None:
        self._coordinators = CoordinatorList(addresses, name=name)
        options = channel_options(reconnect_backoff_max_ms)
        secure = security or ClientSecurity()
        self._channel_factory = channel_factory or (lambda address: secure.open_channel(address, options))
        self._name = name
        self._channel: grpc.Channel | None = None
        self._stub: Any = None  # a GroupCoordinatorStub once connected
        self._admin: Any = None  # a GroupAdminStub on the same channel
        self._inflight: grpc.Future | None = None
        self._aborted = threading.Event()

    @property
    def address(self) -> str:
        """The coordinator the next call goes to."""
        return self._coordinators.address

    # ------------------------------------------------------------------ the calls

    def join_group(self, request: pb.JoinGroupRequest, timeout: float) -> pb.JoinGroupResponse:
        """MEMBER_ID_REQUIRED raises MemberIdRequiredError whose ``member_id`` is the one to join with."""
        response: pb.JoinGroupResponse = self._call("JoinGroup", request, timeout)
        self._raise_for(response.error, member_id=response.member_id or request.member_id)
        return response

    def sync_group(self, request: pb.SyncGroupRequest, timeout: float) -> pb.SyncGroupResponse:
        response: pb.SyncGroupResponse = self._call("SyncGroup", request, timeout)
        self._raise_for(response.error, member_id=request.member_id)
        return response

    def heartbeat(self, request: pb.HeartbeatRequest, timeout: float) -> None:
        response: pb.HeartbeatResponse = self._call("Heartbeat", request, timeout)
        self._raise_for(response.error, member_id=request.member_id)

    def report_load(self, request: pb.ReportLoadRequest, timeout: float) -> None:
        response: pb.ReportLoadResponse = self._call("ReportLoad", request, timeout)
        self._raise_for(response.error, member_id=request.member_id)

    def describe_group(self, request: pb.DescribeGroupRequest, timeout: float) -> pb.DescribeGroupResponse:
        response: pb.DescribeGroupResponse = self._call("DescribeGroup", request, timeout, admin=True)
        self._raise_for(response.error)
        return response

    def leave_group(self, request: pb.LeaveGroupRequest, timeout: float) -> bool:
        """Best effort, also after ``abort()``: True when the coordinator took it; never raises."""
        try:
            response: pb.LeaveGroupResponse = self._stubs()[0].LeaveGroup(request, timeout=timeout)
        except grpc.RpcError as error:
            log.info("%s: could not send LeaveGroup to %s: %s", self._name, self.address, describe_rpc_error(error))
            return False
        if response.error.code != pb.NONE:
            log.info("%s: leave: %s", self._name, response.error.message)
            return False
        return True

    # ------------------------------------------------------------------ where to

    def rediscover(self, hint: str = "") -> None:
        """Go to ``hint``, or to the address after the current one (wrapping around)."""
        if self._coordinators.move(hint):
            self._drop_channel()

    # ------------------------------------------------------------------ lifetime

    def abort(self) -> None:
        """Cancel the call in flight and refuse further ones (leave_group excepted). Any thread."""
        self._aborted.set()
        inflight = self._inflight
        if inflight is not None:
            inflight.cancel()

    def close(self) -> None:
        self._drop_channel()

    # ------------------------------------------------------------------ inside

    def _stubs(self) -> tuple[Any, Any]:
        if self._stub is None:
            self._channel = self._channel_factory(self.address)
            self._stub = _CoordinatorStub(self._channel)
            self._admin = _AdminStub(self._channel)
        return self._stub, self._admin

    def _drop_channel(self) -> None:
        channel, self._channel, self._stub, self._admin = self._channel, None, None, None
        if channel is not None:
            channel.close()

    def _call(self, method: str, request: Message, timeout: float, *, admin: bool = False) -> Any:
        if self._aborted.is_set():
            raise WorkerClosedError("closed")
        coordinator, admin_stub = self._stubs()
        future = getattr(admin_stub if admin else coordinator, method).future(request, timeout=timeout)
        self._inflight = future
        try:
            if self._aborted.is_set():  # abort() may have run before _inflight was set
                future.cancel()
            return future.result()
        except grpc.FutureCancelledError:
            raise WorkerClosedError("closed during a request") from None
        except grpc.RpcError as rpc_error:
            if self._aborted.is_set():
                raise WorkerClosedError("closed during a request") from rpc_error
            failure, move = failure_for_rpc_error(method, self.address, rpc_error)
            if move:
                self.rediscover()
            raise failure from rpc_error
        finally:
            self._inflight = None

    def _raise_for(self, error: pb.Error, *, member_id: str = "") -> None:
        failure, move_to = failure_for_response(error, member_id=member_id)
        if failure is None:
            return
        if move_to is not None:
            self.rediscover(move_to)
        raise failure


def describe_rpc_error(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    detail = error.details() if hasattr(error, "details") else str(error)
    return f"{code.name} {detail}"
