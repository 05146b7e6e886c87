"""``worker.transport`` for ``grpc.aio``: the same calls, errors and rediscovery, awaited on the loop.

Which coordinator comes next (``worker.lookup.Route``: FindCoordinator's answer, hints, the
bootstrap list), the calls themselves and which error a failed call or a response becomes
(``worker.calls``) are the threaded transport's own decisions: only the waiting differs. A call in
flight is cancelled the asyncio way, by cancelling the task that awaits it; ``leave_group`` never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord.channels import ClientSecurity, channel_options
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker import calls
from groupcoord.worker.aio_stream import AioStreamLink
from groupcoord.worker.call_outcomes import LEAVE_FAILURES, LeaveRound, Left, lookup_round
from groupcoord.worker.calls import AnswerT, RequestT
from groupcoord.worker.stream_tags import STREAMED, StreamBroken, StreamUnsupported

__all__ = ["AioChannelFactory", "AsyncTransport"]

log = logging.getLogger("groupcoord.worker")

AioChannelFactory = Callable[[str], grpc.aio.Channel]

_CoordinatorStub: Any = pb_grpc.GroupCoordinatorStub
_AdminStub: Any = pb_grpc.GroupAdminStub


class AsyncTransport(calls.Routed[AioStreamLink]):
    """The coordinator connection of one asyncio worker; used from its loop only."""

    def __init__(
        self, addresses: Sequence[str], channel_factory: AioChannelFactory | None = None, *, name: str = "worker",
        reconnect_backoff_max_ms: int = 1_000, security: ClientSecurity | None = None, group_id: str = "",
        session_stream: bool = True,
    ) -> None:
        super().__init__(addresses, name=name, group_id=group_id)
        options = channel_options(reconnect_backoff_max_ms)
        secure = security or ClientSecurity()
        self._channel_factory = channel_factory or (lambda address: secure.open_aio_channel(address, options))
        self._metadata = secure.call_metadata()
        self.streams = AioStreamLink(self._channel_factory, secure if channel_factory is None else (
            secure, id(channel_factory)), self._metadata, reconnect_max_s=reconnect_backoff_max_ms / 1000,
            enabled=session_stream)
        self._channel: grpc.aio.Channel | None = None
        self._channel_address = ""
        self._stub: Any = None
        self._admin: Any = None

    async def join_group(self, request: pb.JoinGroupRequest, timeout: float) -> pb.JoinGroupResponse:
        return await self._request(calls.JOIN_GROUP, request, timeout)

    async def sync_group(self, request: pb.SyncGroupRequest, timeout: float) -> pb.SyncGroupResponse:
        return await self._request(calls.SYNC_GROUP, request, timeout)

    async def heartbeat(self, request: pb.HeartbeatRequest, timeout: float) -> None:
        await self._request(calls.HEARTBEAT, request, timeout)

    async def report_load(self, request: pb.ReportLoadRequest, timeout: float) -> None:
        await self._request(calls.REPORT_LOAD, request, timeout)

    async def describe_group(self, request: pb.DescribeGroupRequest, timeout: float) -> pb.DescribeGroupResponse:
        return await self._request(calls.DESCRIBE_GROUP, request, timeout)

    async def group_heartbeat(self, request: pb.GroupHeartbeatRequest, timeout: float) -> pb.GroupHeartbeatResponse:
        return await self._request(calls.GROUP_HEARTBEAT, request, timeout)

    async def group_leave(self, request: pb.GroupHeartbeatRequest, timeout: float) -> bool:
        """A GroupHeartbeat with epoch -1 or -2: best effort; never raises (but a cancellation). On the stream
        while the member's calls go there, behind them (``call_outcomes.LeaveRound``)."""
        return await self._leave("GroupHeartbeat", "group_heartbeat", request, timeout)

    async def leave_group(self, request: pb.LeaveGroupRequest, timeout: float) -> bool:
        """Best effort: True when the coordinator took it; never raises (but a cancellation)."""
        return await self._leave("LeaveGroup", "leave_group", request, timeout)

    async def _leave(self, method: str, body: str, request: Message, timeout: float) -> bool:
        """Send the leave the ways ``LeaveRound`` says (``Transport._leave``'s driver: only the waiting differs)."""
        leave = LeaveRound(method, self._name, self.address)
        while leave.way is not None:
            leave.answered(await self._leave_once(leave.way, method, body, request, timeout))
        return leave.taken

    async def _leave_once(self, way: str, method: str, body: str, request: Message,
                          timeout: float) -> Left | BaseException:
        try:
            if way == "unary":
                unary: Left = await getattr((await self._stubs())[0], method)(request, timeout=timeout,
                                                                                metadata=self._metadata)
                return unary
            sent = await self.streams.send(self.address, body, request)
            if sent is None:  # no stream to this address now
                return StreamUnsupported(self.address)
            answer: Left = await self.streams.wait(sent, timeout)
            return answer
        except LEAVE_FAILURES as failure:
            return failure

    async def close(self) -> None:
        await self.streams.release()
        await self._drop_channel()

    # ------------------------------------------------------------------ finding the coordinator

    async def _locate(self, timeout: float) -> None:
        """One FindCoordinator round (``lookup_round`` decides; this makes its calls)."""
        round_ = lookup_round(self._route, self._group_id, timeout)
        reply: Any = None
        while True:
            try:
                call = round_.send(reply)
            except StopIteration:
                return
            try:
                reply = await self._ask(call.address, call.method, call.request, call.timeout, admin=call.admin)
            except grpc.RpcError as rpc_error:
                reply = rpc_error

    async def _ask(self, address: str, method: str, request: Message, timeout: float, *, admin: bool = False) -> Any:
        """One call to ``address``, on the worker's channel if it goes there, else on one opened for it."""
        if address == self._channel_address and self._stub is not None:
            stub = self._admin if admin else self._stub
            return await getattr(stub, method)(request, timeout=timeout, metadata=self._metadata)
        channel = self._channel_factory(address)
        try:
            stub = (_AdminStub if admin else _CoordinatorStub)(channel)
            return await getattr(stub, method)(request, timeout=timeout, metadata=self._metadata)
        finally:
            await channel.close()

    # ------------------------------------------------------------------ inside

    async def _stubs(self) -> tuple[Any, Any]:
        if self._stub is not None and self._channel_address != self.address:
            await self._drop_channel()
        if self._stub is None:
            self._channel = self._channel_factory(self.address)
            self._channel_address = self.address
            self._stub = _CoordinatorStub(self._channel)
            self._admin = _AdminStub(self._channel)
        return self._stub, self._admin

    async def _drop_channel(self) -> None:
        channel, self._channel, self._stub, self._admin = self._channel, None, None, None
        self._channel_address = ""
        if channel is not None:
            await channel.close()

    async def _request(self, rpc: calls.Rpc[RequestT, AnswerT], request: RequestT, timeout: float) -> AnswerT:
        """``Transport._request`` awaited: the stream if the member's calls go there, else unary; its answer
        settled (``worker.calls``)."""
        self._follow_news()
        if self._route.lookup_needed():
            await self._locate(timeout)
        if not rpc.admin and rpc.method in STREAMED:
            answer = await self._try_stream(rpc.method, request, timeout)
            if answer is not None:
                return calls.settle(rpc, request, answer, self._route)
        coordinator, admin_stub = await self._stubs()
        address = self.address
        try:
            response = await getattr(admin_stub if rpc.admin else coordinator, rpc.method)(
                request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as rpc_error:
            raise calls.unary_failed(self._route, rpc.method, address, rpc_error) from rpc_error
        return calls.settle(rpc, request, response, self._route)

    async def _try_stream(self, method: str, request: Message, timeout: float) -> Any:
        """The answer when the call went on the stream; None: send it unary."""
        address = self.address
        sent = await self.streams.send(address, STREAMED[method], request)
        if sent is None:
            return None
        try:
            return await self.streams.wait(sent, timeout)
        except StreamUnsupported:
            return None  # its first answer was UNIMPLEMENTED: nothing was served, send it unary
        except (StreamBroken, TimeoutError) as broken:
            raise calls.stream_failed(self._route, method, address, broken) from broken
