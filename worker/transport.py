"""How the worker reaches its coordinator: lookup, channel, stubs, deadlines, rediscovery, cancel, leave.

The state logic (``worker.client``) never sees gRPC: each call here returns the
response, or raises a ``groupcoord.errors`` class — the response's own error code
(``errors.raise_for``), or ``CoordinatorNotAvailableError`` for a transport failure
(the deadline passed, the address refused, the server failed). Both kinds of
"coordinator moved" (NOT_COORDINATOR with or without a hint, COORDINATOR_NOT_AVAILABLE,
transport failures) first tell the transport's ``worker.lookup.Route``, so the caller's retry
goes to the hinted address or asks FindCoordinator again; COORDINATOR_LOAD_IN_PROGRESS keeps the
address (the right coordinator, still loading).

``abort()`` (from any thread) cancels the call in flight and refuses new ones with
``WorkerClosedError``; ``leave_group`` still goes out afterwards, so a closing worker
can say goodbye.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord.channels import ClientSecurity, channel_options
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker import calls
from groupcoord.worker.call_outcomes import (
    LEAVE_FAILURES,
    LeaveRound,
    Left,
    LookupCall,
    advertised_self,
    describe_rpc_error,
    failure_for_response,
    failure_for_rpc_error,
    lookup_round,
    lookup_timeout,
    status_of,
)
from groupcoord.worker.calls import AnswerT, RequestT
from groupcoord.worker.effects import WorkerClosedError
from groupcoord.worker.lookup import CoordinatorList
from groupcoord.worker.stream_link import StreamLink
from groupcoord.worker.stream_tags import STREAMED, StreamBroken, StreamUnsupported

__all__ = ["ChannelFactory", "CoordinatorList", "GiveUp", "Transport", "WorkerClosedError", "advertised_self",
           "LookupCall", "describe_rpc_error", "failure_for_response", "failure_for_rpc_error", "lookup_round",
           "lookup_timeout", "status_of"]

log = logging.getLogger("groupcoord.worker")

ChannelFactory = Callable[[str], grpc.Channel]
GiveUp = tuple[float, Callable[[], None]]
"""(seconds, callback): if the call is still unanswered after ``seconds``, ``callback()`` runs (on the
caller's thread) and the call goes on waiting for its answer or its deadline."""

# protoc's gRPC plugin writes the stub classes without type hints: reach them as Any.
_CoordinatorStub: Any = pb_grpc.GroupCoordinatorStub
_AdminStub: Any = pb_grpc.GroupAdminStub

class Transport(calls.Routed[StreamLink]):
    """The coordinator connection of one worker; used from the worker's thread (``abort`` from any).

    With ``group_id`` the group's coordinator is found with FindCoordinator at the ``addresses``
    (the bootstrap list; ``worker.lookup`` decides when); without, the addresses are used in turn."""

    def __init__(
        self, addresses: Sequence[str], channel_factory: ChannelFactory | None = None, *, name: str = "worker",
        reconnect_backoff_max_ms: int = 1_000, security: ClientSecurity | None = None, group_id: str = "",
        session_stream: bool = True,
    ) -> None:
        super().__init__(addresses, name=name, group_id=group_id)
        options = channel_options(reconnect_backoff_max_ms)
        secure = security or ClientSecurity()
        self._channel_factory = channel_factory or (lambda address: secure.open_channel(address, options))
        # members with the same security (or the same channel factory) share a stream
        self.streams = StreamLink(self._channel_factory, secure if channel_factory is None else (secure, id(
            channel_factory)), secure.call_metadata, reconnect_max_s=reconnect_backoff_max_ms / 1000,
            enabled=session_stream)
        self._channel: grpc.Channel | None = None
        self._channel_address = ""
        self._stub: Any = None  # a GroupCoordinatorStub once connected
        self._admin: Any = None  # a GroupAdminStub on the same channel
        self._inflight: grpc.Future | Future[Any] | None = None
        self._aborted = threading.Event()

    # ------------------------------------------------------------------ the calls

    def join_group(self, request: pb.JoinGroupRequest, timeout: float,
                   give_up: GiveUp | None = None) -> pb.JoinGroupResponse:
        """MEMBER_ID_REQUIRED raises MemberIdRequiredError whose ``member_id`` is the one to join with."""
        return self._request(calls.JOIN_GROUP, request, timeout, give_up)

    def sync_group(self, request: pb.SyncGroupRequest, timeout: float,
                   give_up: GiveUp | None = None) -> pb.SyncGroupResponse:
        return self._request(calls.SYNC_GROUP, request, timeout, give_up)

    def heartbeat(self, request: pb.HeartbeatRequest, timeout: float) -> None:
        self._request(calls.HEARTBEAT, request, timeout)

    def report_load(self, request: pb.ReportLoadRequest, timeout: float) -> None:
        self._request(calls.REPORT_LOAD, request, timeout)

    def describe_group(self, request: pb.DescribeGroupRequest, timeout: float) -> pb.DescribeGroupResponse:
        return self._request(calls.DESCRIBE_GROUP, request, timeout)

    def group_heartbeat(self, request: pb.GroupHeartbeatRequest, timeout: float) -> pb.GroupHeartbeatResponse:
        """The consumer protocol's one call (join, heartbeat); its error code raised as the classic calls' are."""
        return self._request(calls.GROUP_HEARTBEAT, request, timeout)

    def group_leave(self, request: pb.GroupHeartbeatRequest, timeout: float) -> bool:
        """A GroupHeartbeat with epoch -1 or -2: best effort, also after ``abort()``; never raises. It goes the
        way the member's calls go (``call_outcomes.LeaveRound``)."""
        return self._leave("GroupHeartbeat", "group_heartbeat", request, timeout)

    def leave_group(self, request: pb.LeaveGroupRequest, timeout: float) -> bool:
        """Best effort, also after ``abort()``: True when the coordinator took it; never raises."""
        return self._leave("LeaveGroup", "leave_group", request, timeout)

    def _leave(self, method: str, body: str, request: Message, timeout: float) -> bool:
        """Send the leave the ways ``LeaveRound`` says (not through ``_request``: after ``abort()`` too)."""
        leave = LeaveRound(method, self._name, self.address)
        while leave.way is not None:
            leave.answered(self._leave_once(leave.way, method, body, request, timeout))
        return leave.taken

    def _leave_once(self, way: str, method: str, body: str, request: Message, timeout: float) -> Left | BaseException:
        try:
            if way == "stream":
                answer: Left = self.streams.ask(self.address, body, request, timeout)
            else:
                answer = getattr(self._stubs()[0], method)(request, timeout=timeout)
            return answer
        except LEAVE_FAILURES as failure:
            return failure

    # ------------------------------------------------------------------ lifetime

    def abort(self) -> None:
        """Cancel the call in flight and refuse further ones (leave_group excepted). Any thread."""
        self._aborted.set()
        inflight = self._inflight
        if inflight is not None:
            inflight.cancel()

    def close(self) -> None:
        self.streams.release()
        self._drop_channel()

    # ------------------------------------------------------------------ finding the coordinator

    def _locate(self, timeout: float) -> None:
        """One FindCoordinator round (``lookup_round`` decides; this makes its calls)."""
        round_ = lookup_round(self._route, self._group_id, timeout)
        reply: Any = None
        while True:
            try:
                call = round_.send(reply)
            except StopIteration:
                return
            try:
                reply = self._ask(call.address, call.method, call.request, call.timeout, admin=call.admin)
            except grpc.RpcError as rpc_error:
                reply = rpc_error

    def _ask(self, address: str, method: str, request: Message, timeout: float, *, admin: bool = False) -> Any:
        """One call to ``address``, on the worker's channel if it goes there, else on one opened for it."""
        if address == self._channel_address and self._stub is not None:
            return self._wait(getattr(self._admin if admin else self._stub, method).future(request, timeout=timeout))
        channel = self._channel_factory(address)
        try:
            stub = (_AdminStub if admin else _CoordinatorStub)(channel)
            return self._wait(getattr(stub, method).future(request, timeout=timeout))
        finally:
            channel.close()

    def _wait(self, future: grpc.Future, give_up: GiveUp | None = None) -> Any:
        """The answer of ``future``; ``abort()`` cancels it (``WorkerClosedError``)."""
        self._inflight = future
        try:
            if self._aborted.is_set():  # abort() may have run before _inflight was set
                future.cancel()
            if give_up is not None:
                after_s, on_give_up = give_up
                try:
                    return future.result(timeout=max(0.0, after_s))
                except grpc.FutureTimeoutError:
                    on_give_up()
            return future.result()
        except grpc.FutureCancelledError:
            raise WorkerClosedError("closed during a request") from None
        except grpc.RpcError as rpc_error:
            if self._aborted.is_set():
                raise WorkerClosedError("closed during a request") from rpc_error
            raise
        finally:
            self._inflight = None

    # ------------------------------------------------------------------ inside

    def _stubs(self) -> tuple[Any, Any]:
        if self._stub is not None and self._channel_address != self.address:
            self._drop_channel()
        if self._stub is None:
            self._channel = self._channel_factory(self.address)
            self._channel_address = self.address
            self._stub = _CoordinatorStub(self._channel)
            self._admin = _AdminStub(self._channel)
        return self._stub, self._admin

    def _drop_channel(self) -> None:
        channel, self._channel, self._stub, self._admin = self._channel, None, None, None
        self._channel_address = ""
        if channel is not None:
            channel.close()

    def _request(self, rpc: calls.Rpc[RequestT, AnswerT], request: RequestT, timeout: float,
                 give_up: GiveUp | None = None) -> AnswerT:
        """The call on the member's Session stream if it goes there, else unary; its answer settled
        (``worker.calls``: the error raised, the route moved)."""
        if self._aborted.is_set():
            raise WorkerClosedError("closed")
        self._follow_news()
        if self._route.lookup_needed():
            self._locate(timeout)
        if not rpc.admin and rpc.method in STREAMED:
            sent, answer = self._try_stream(rpc.method, request, timeout, give_up)
            if sent:
                return calls.settle(rpc, request, answer, self._route)
        coordinator, admin_stub = self._stubs()
        address = self.address
        try:
            response = self._wait(getattr(admin_stub if rpc.admin else coordinator, rpc.method).future(
                request, timeout=timeout), give_up)
        except grpc.RpcError as rpc_error:
            raise calls.unary_failed(self._route, rpc.method, address, rpc_error) from rpc_error
        return calls.settle(rpc, request, response, self._route)

    # ------------------------------------------------------------------ the Session stream

    def _track(self, inflight: Future[Any] | None) -> None:
        self._inflight = inflight

    def _try_stream(self, method: str, request: Message, timeout: float,
                    give_up: GiveUp | None) -> tuple[bool, Any]:
        """(True, the answer) when the call went on the stream; (False, None): send it unary."""
        address = self.address
        pending = self.streams.send(address, STREAMED[method], request)
        if pending is None:
            return False, None
        try:
            return True, self.streams.wait(pending, timeout, give_up, self._aborted, self._track)
        except StreamUnsupported:
            return False, None  # the stream's first answer was UNIMPLEMENTED: nothing was served
        except (StreamBroken, TimeoutError) as failure:
            raise calls.stream_failed(self._route, method, address, failure) from failure
