"""The member and admin calls both transports make, as one table, and what each call's outcome does to the
route: the error a response, a broken stream or a failed unary call becomes, and whether the coordinator is
looked up again first; and what both transports hold (``Routed``: the route, the name, the stream link). The
threaded and the asyncio transport each do only the I/O between (``_request``): send the call on the
Session stream or unary, and wait for it their own way. No channel, no thread, no event loop here."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.call_outcomes import failure_for_response, failure_for_rpc_error
from groupcoord.worker.lookup import Route

__all__ = ["DESCRIBE_GROUP", "GROUP_HEARTBEAT", "HEARTBEAT", "JOIN_GROUP", "REPORT_LOAD", "SYNC_GROUP", "AnswerT",
           "RequestT", "Routed", "Rpc", "follow_news", "settle", "stream_failed", "unary_failed"]

log = logging.getLogger("groupcoord.worker")


class _Answer(Protocol):
    """What every response of the table carries: its error."""

    @property
    def error(self) -> pb.Error: ...


RequestT = TypeVar("RequestT", bound=Message)
AnswerT = TypeVar("AnswerT", bound=_Answer)


@dataclass(frozen=True)
class Rpc(Generic[RequestT, AnswerT]):
    """One call: its method, its service (``admin``: GroupAdmin, never on the stream), and which member id an
    error names (``member``: the request's, the response's if it gave one (a join is given its id), or none)."""

    method: str
    member: Literal["request", "response", "none"] = "request"
    admin: bool = False

    def member_id(self, request: RequestT, response: AnswerT) -> str:
        if self.member == "none":
            return ""
        asked: str = getattr(request, "member_id", "")
        return (getattr(response, "member_id", "") or asked) if self.member == "response" else asked


JOIN_GROUP: Rpc[pb.JoinGroupRequest, pb.JoinGroupResponse] = Rpc("JoinGroup", member="response")
SYNC_GROUP: Rpc[pb.SyncGroupRequest, pb.SyncGroupResponse] = Rpc("SyncGroup")
HEARTBEAT: Rpc[pb.HeartbeatRequest, pb.HeartbeatResponse] = Rpc("Heartbeat")
REPORT_LOAD: Rpc[pb.ReportLoadRequest, pb.ReportLoadResponse] = Rpc("ReportLoad")
DESCRIBE_GROUP: Rpc[pb.DescribeGroupRequest, pb.DescribeGroupResponse] = Rpc("DescribeGroup", member="none",
                                                                             admin=True)
GROUP_HEARTBEAT: Rpc[pb.GroupHeartbeatRequest, pb.GroupHeartbeatResponse] = Rpc("GroupHeartbeat", member="response")


def settle(rpc: Rpc[RequestT, AnswerT], request: RequestT, answer: Any, route: Route) -> AnswerT:
    """The response, or its error raised (MEMBER_ID_REQUIRED's names the id to join with). A "coordinator
    moved" answer first moves the route (to its hint, or to a new lookup); any other answer keeps it.
    ``answer`` as the stubs give it (untyped: protoc's gRPC plugin writes no hints), typed from here on."""
    response: AnswerT = answer
    failure, move_to = failure_for_response(response.error, member_id=rpc.member_id(request, response))
    if move_to is not None and isinstance(failure, errors.CoordinatorMovedError):
        route.moved(failure, move_to)
    else:
        route.succeeded()
    if failure is not None:
        raise failure
    return response


def follow_news(route: Route, hint: str | None, name: str) -> None:
    """A CoordinatorMoved heard on the stream since the last call (None: none): go to its hint, or ask
    FindCoordinator again ("")."""
    if hint is not None:
        log.info("%s: told on the stream that the group's coordinator moved%s", name, f" to {hint}" if hint else "")
        route.moved(errors.NotCoordinatorError("the coordinator moved (Session news)"), hint)


def stream_failed(route: Route, method: str, address: str, failure: BaseException) -> errors.GroupCoordError:
    """The error a call sent on the stream fails with when the stream broke or the deadline passed: the
    coordinator is not available (looked up again first)."""
    route.moved(None)
    why = str(failure) or "DEADLINE_EXCEEDED on the Session stream"  # a deadline's TimeoutError says nothing
    return errors.CoordinatorNotAvailableError(f"{method} to {address} failed: {why}")


def unary_failed(route: Route, method: str, address: str, rpc_error: grpc.RpcError) -> errors.GroupCoordError:
    """The error a unary call fails with (``failure_for_rpc_error``); a transport failure moves the route."""
    failure, move = failure_for_rpc_error(method, address, rpc_error)
    if move:
        route.moved(None)
    return failure


class _Link(Protocol):
    """What ``Routed`` asks of a transport's Session-stream link (``StreamLink``, ``AioStreamLink``)."""

    def via(self, address: str) -> str: ...

    def take_move(self) -> str | None: ...


LinkT = TypeVar("LinkT", bound=_Link)


class Routed(Generic[LinkT]):
    """What both transports hold besides their I/O: where the group's calls go (``worker.lookup.Route``; with
    ``group_id`` found with FindCoordinator, without, the addresses in turn), the worker's name for its log
    lines, and the link to the Session streams its member calls use (``streams``, set by the transport)."""

    streams: LinkT
    """The Session streams this transport's member calls use (``on_nudge``: its news)."""

    def __init__(self, addresses: Sequence[str], *, name: str, group_id: str) -> None:
        self._route = Route(addresses, name=name)
        self._route.enabled = bool(group_id)
        self._group_id = group_id
        self._name = name

    @property
    def address(self) -> str:
        """The coordinator the next call goes to."""
        return self._route.address

    @property
    def lookups(self) -> int:
        """FindCoordinator rounds so far."""
        return self._route.lookups

    @property
    def via(self) -> str:
        """"stream" when the member's calls go on a Session stream now, else "unary"."""
        return self.streams.via(self.address)

    def _follow_news(self) -> None:
        """A CoordinatorMoved heard on the member's Session stream since the last call: the route follows it."""
        follow_news(self._route, self.streams.take_move(), self._name)
