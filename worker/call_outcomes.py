"""What a coordinator's answer or a failed call means to a worker: the error it raises, whether to look
the coordinator up again, and the lookup and a best-effort leave as generators both transports drive
(they make the calls they yield; these decide). No channel, no thread, no event loop here."""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from google.protobuf.message import Message

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.lookup import Route
from groupcoord.worker.stream_tags import StreamBroken, StreamUnsupported

log = logging.getLogger("groupcoord.worker")

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


def lookup_timeout(timeout: float, addresses: int) -> float:
    """Each bootstrap address's share of a call's deadline: a silent one must leave time for the next,
    but no address gets less than a second (or the whole deadline, if shorter)."""
    return max(min(timeout, 1.0), timeout / max(1, addresses))


def advertised_self(response: pb.DescribeClusterResponse) -> str:
    """The address the answering coordinator advertises (DescribeCluster's ``self``), or ""."""
    return next((c.address for c in response.coordinators if c.self), "")


def status_of(rpc_error: grpc.RpcError) -> grpc.StatusCode:
    return rpc_error.code() if hasattr(rpc_error, "code") else grpc.StatusCode.UNKNOWN


@dataclass(frozen=True)
class LookupCall:
    """One call a FindCoordinator round asks its transport to make (to the coordinator or admin service)."""

    address: str
    method: str
    request: Message
    timeout: float
    admin: bool = False


LookupRound = Generator[LookupCall, Any, None]
"""Yields the calls to make; is sent each one's response, or the ``grpc.RpcError`` it failed with."""


def lookup_round(route: Route, group_id: str, timeout: float) -> LookupRound:
    """One FindCoordinator round over the bootstrap addresses, without I/O: ``worker.lookup`` decides,
    the threaded and the asyncio transport each make the calls it yields (their ``_locate``). Returns
    once the route knows where to go; raises the error the group request would fail with."""
    order = route.ask_order()
    each = lookup_timeout(timeout, len(order))
    request = pb.FindCoordinatorRequest(group_ids=[group_id])
    failures: list[str] = []
    for asked in order:
        response = yield LookupCall(asked, "FindCoordinator", request, each)
        if isinstance(response, grpc.RpcError):
            if status_of(response) is grpc.StatusCode.UNIMPLEMENTED:
                route.lookup_unsupported(asked)
                return
            failure, move = failure_for_rpc_error("FindCoordinator", asked, response)
            if not move:
                raise failure from response
            failures.append(f"{asked}: {status_of(response).name}")
            continue
        errors.raise_for(response.error)
        entry = response.coordinators[0]
        if route.wants_identity(asked, entry):
            who = yield LookupCall(asked, "DescribeCluster", pb.DescribeClusterRequest(), each, admin=True)
            if isinstance(who, grpc.RpcError) and status_of(who) is not grpc.StatusCode.UNIMPLEMENTED:
                failures.append(f"{asked}: DescribeCluster failed")  # it answered, then did not: unreachable
                continue
            # an older coordinator without DescribeCluster cannot say who it is ("")
            route.identified(asked, "" if isinstance(who, grpc.RpcError) else advertised_self(who))
            if not isinstance(who, grpc.RpcError):
                route.learn(asked, who)
        verdict = route.answered(asked, entry)
        if verdict is True:
            if route.wants_cluster():  # the bootstrap list is a starting point: learn the live coordinators
                cluster = yield LookupCall(asked, "DescribeCluster", pb.DescribeClusterRequest(), each, admin=True)
                if not isinstance(cluster, grpc.RpcError):
                    route.learn(asked, cluster)
            return
        if verdict is not False:
            raise verdict
    unusable = route.round_failed(failures)
    if unusable is not None:
        raise unusable


def describe_rpc_error(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    detail = error.details() if hasattr(error, "details") else str(error)
    return f"{code.name} {detail}"


LEAVE_FAILURES = (grpc.RpcError, StreamBroken, StreamUnsupported, TimeoutError, errors.GroupCoordError)
"""What a leave's call may fail with: the drivers hand each of these to ``LeaveRound.answered``, never raise it."""


Left = pb.GroupHeartbeatResponse | pb.LeaveGroupResponse
"""The answers to a leave."""


class LeaveRound:
    """A best-effort leave (LeaveGroup, or a GroupHeartbeat with epoch -1 or -2) as both transports send it.
    ``way`` says how to send it next ("stream", "unary", None: done) and ``answered`` takes what came back;
    ``taken`` is then whether the coordinator took it. On the member's Session stream first, behind its
    calls (the coordinator steps one member's requests in the order sent, so a join given up on cannot
    reach it after the leave); unary when the stream cannot carry it (none there, or it broke: a second
    leave of a member already gone is only refused). Never raises: a leave not taken is one log line."""

    def __init__(self, method: str, name: str, address: str) -> None:
        self.method, self._name, self._address = method, name, address
        self.way: Literal["stream", "unary"] | None = "stream"
        self.taken = False

    def answered(self, outcome: Left | BaseException) -> None:
        """The answer to the leave sent ``way``, or the failure (one of ``LEAVE_FAILURES``) it got."""
        if self.way == "stream" and isinstance(outcome, (StreamBroken, StreamUnsupported)):
            self.way = "unary"
            return
        self.way = None
        if isinstance(outcome, grpc.RpcError):
            log.info("%s: could not send %s to %s: %s", self._name, self.method, self._address,
                     describe_rpc_error(outcome))
        elif isinstance(outcome, BaseException):
            log.info("%s: %s not answered by %s: %s", self._name, self.method, self._address,
                     str(outcome) or "deadline")
        elif outcome.error.code != pb.NONE:
            log.info("%s: leave: %s", self._name, outcome.error.message)
        else:
            self.taken = True
