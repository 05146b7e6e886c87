"""The one place every RPC is authenticated and authorized: a gRPC server interceptor.

``RULES`` maps each method's full name to what it needs: an operation on a group (taken from the
request), the members it acts for, and, for ListGroups, a filter on the answer. Health checks are
open to anyone (load balancers probe them without credentials); reflection needs a valid
credential only. **A method missing from ``RULES`` is refused** with PERMISSION_DENIED naming it
whenever authentication or ACLs are on, so a new RPC cannot slip through:
``tests/coordinator/auth/test_auth_grpc.py`` fails until it has a rule.

Member ids are not capabilities: a request naming a member (by member or instance id) passes only
for the principal that joined it, or for an admin of the group. A member stored without a
principal (joined before authentication was turned on) may be acted for by any principal with
``member`` on its group, until it re-joins.

Authentication needs only the call's metadata (or the TLS handshake, which refuses a client
without a verified certificate before any call), so a call without a valid token is refused as it
arrives, before its body is read or decoded: its handler aborts without taking the request from
the stream (``_refuse_unread``). A caller without a credential costs the coordinator no more than
the bytes HTTP/2 flow control lets it send (issue 26: four senders of 24 MiB PutTasks with no
token took 3 GiB of memory to decode and refuse, and slowed an admin's calls 60x).

Issue 38: the same holds for who may do what. ``before_reading`` decides from the metadata (and, with
mTLS, the handshake) whether the caller may call the method on any group at all: a principal with no
entry that could allow the method's operation is refused before its body is read. ``before_parsing``
takes the group id the request names (read from the first bytes of the body by
``coordinator.rpc.gate``) and refuses an id over ``max_id_length`` or a group the principal may not act
on before the rest of the body is decoded. ``admit`` checks the parsed request again, in full.

Refusals answer UNAUTHENTICATED (no or bad credential), PERMISSION_DENIED or INVALID_ARGUMENT (an id
over its limit) with one line naming principal, operation and group (client input quoted to a short
prefix); they are logged at WARNING, at most ``RefusalLog.lines_per_window`` lines per window, and
reach no handler, so they change nothing. A refusal made before the body is read is answered after
``refusal_delay_s`` (``coordinator.auth.refusals``). The principal of an accepted call is in
``CURRENT_PRINCIPAL`` while its handler runs.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
from google.protobuf.message import Message

from groupcoord.coordinator.auth.acl import Acls, Operation
from groupcoord.coordinator.auth.principals import Authenticated, Refused, authenticate
from groupcoord.coordinator.auth.refusals import RefusalDelay, RefusalLog, quoted
from groupcoord.coordinator.auth.tokens import TokenTable
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CURRENT_PRINCIPAL", "RULES", "Denied", "Guard", "OwnerLookup", "Policy", "Rule"]

log = logging.getLogger("groupcoord.auth")

#: The principal of the call being handled (set by the guard around the handler).
CURRENT_PRINCIPAL: ContextVar[str] = ContextVar("groupcoord_principal", default="")

#: (group id, member id, instance id) -> principal that joined that member ("" unknown), None: no such member
OwnerLookup = Callable[[str, str, str], "str | None"]


@dataclass(frozen=True)
class Policy:
    """What the server checks; replaced as a whole when the files are reloaded (SIGHUP)."""

    mtls: bool = False
    tokens: TokenTable | None = None
    acls: Acls | None = None  # None: every authenticated principal may do everything

    @property
    def enabled(self) -> bool:
        return self.mtls or self.tokens is not None or self.acls is not None


def _no_group(_request: Any) -> str | None:
    return None


def _no_members(_request: Any) -> list[tuple[str, str]]:
    return []


@dataclass(frozen=True)
class Rule:
    """What one method needs. ``operation`` None: any authenticated principal (``public``: anyone)."""

    operation: Operation | None = None
    group: Callable[[Any], str | None] = _no_group
    members: Callable[[Any], list[tuple[str, str]]] = _no_members
    filter_response: Callable[[Any, Callable[[str], bool]], Any] | None = None
    public: bool = False


def _group_id(request: Any) -> str:
    return str(request.group_id)


def _member(request: Any) -> list[tuple[str, str]]:
    return [(request.member_id, getattr(request, "instance_id", ""))]


def _leaving(request: pb.LeaveGroupRequest) -> list[tuple[str, str]]:
    named = [(m.member_id, m.instance_id) for m in request.members]
    return named + ([(request.member_id, request.instance_id)] if request.member_id or request.instance_id else [])


def _only_describable(response: pb.ListGroupsResponse, may_describe: Callable[[str], bool]) -> pb.ListGroupsResponse:
    visible = [g for g in response.groups if may_describe(g.group_id)]
    del response.groups[:]
    response.groups.extend(visible)
    return response


def _only_locatable(response: pb.FindCoordinatorResponse,
                    may_describe: Callable[[str], bool]) -> pb.FindCoordinatorResponse:
    """FindCoordinator, as Kafka's: each group needs ``describe`` (which ``member`` implies, so a worker
    finds its own coordinator); a group the caller may not describe gets GROUP_AUTHORIZATION_FAILED and
    no address, whether or not it exists."""
    for entry in response.coordinators:
        if entry.group_id and not may_describe(entry.group_id):
            entry.address = ""
            entry.epoch = 0
            entry.error.CopyFrom(pb.Error(code=pb.GROUP_AUTHORIZATION_FAILED,
                                          message=f"may not describe group {quoted(entry.group_id)}"))
    return response


_COORDINATOR = "/groupcoord.v1.GroupCoordinator/"
_ADMIN = "/groupcoord.v1.GroupAdmin/"
_MEMBER = Rule(Operation.MEMBER, _group_id, _member)

RULES: dict[str, Rule] = {
    _COORDINATOR + "JoinGroup": _MEMBER,
    _COORDINATOR + "SyncGroup": _MEMBER,
    _COORDINATOR + "Heartbeat": _MEMBER,
    _COORDINATOR + "LeaveGroup": Rule(Operation.MEMBER, _group_id, _leaving),
    _COORDINATOR + "ReportLoad": _MEMBER,
    _COORDINATOR + "GroupHeartbeat": _MEMBER,
    # opened by a principal with `member` on some group; each message checked as its twin (rpc.session_stream)
    _COORDINATOR + "Session": Rule(Operation.MEMBER),
    # batched: any authenticated principal may ask; the answer is filtered per group (describe)
    _COORDINATOR + "FindCoordinator": Rule(filter_response=_only_locatable),
    _ADMIN + "ListGroups": Rule(filter_response=_only_describable),
    _ADMIN + "DescribeGroup": Rule(Operation.DESCRIBE, _group_id),
    _ADMIN + "PutTasks": Rule(Operation.ADMIN, _group_id),
    _ADMIN + "DeleteTasks": Rule(Operation.ADMIN, _group_id),
    _ADMIN + "DeleteGroup": Rule(Operation.ADMIN, _group_id),
    # addresses, shard leaders and counts; no group ids: any authenticated principal
    _ADMIN + "DescribeCluster": Rule(),
    _ADMIN + "PublishLoadSnapshot": Rule(Operation.ADMIN, lambda r: str(r.snapshot.group_id)),
    "/grpc.health.v1.Health/Check": Rule(public=True),
    "/grpc.health.v1.Health/Watch": Rule(public=True),
    "/grpc.health.v1.Health/List": Rule(public=True),
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": Rule(),
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": Rule(),
}


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Guard(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type information
    """Install with ``start_server(..., interceptors=[guard])``; set ``policy`` to reload."""

    policy: Policy
    owner_of: OwnerLookup
    rules: dict[str, Rule] = field(default_factory=lambda: dict(RULES))
    max_id_length: int = 255  # CoordinatorConfig.max_id_length: a longer group id is refused before any ACL look
    refusal_delay_s: float = 0.1  # CoordinatorConfig.failed_request_delay_ms, in seconds
    refusal_log: RefusalLog = field(default_factory=lambda: RefusalLog(log), repr=False, compare=False)
    _delay: RefusalDelay = field(default_factory=RefusalDelay, init=False, repr=False, compare=False)
    # method -> (its handler, the guarded one): built once per method, not per call (it reads the
    # policy when called, so a reload needs no rebuild)
    _guarded: dict[str, tuple[Any, Any]] = field(default_factory=dict, init=False, repr=False, compare=False)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails
    ) -> Any:
        handler = await continuation(details)
        if handler is None or not self.policy.enabled:
            return handler
        refused = self._refused_on_arrival(details)
        if refused is not None:
            return _refuse_unread(refused, self)
        method = details.method
        cached = self._guarded.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        guarded = _wrap(handler, self, method)
        self._guarded[method] = (handler, guarded)
        return guarded

    def _refused_on_arrival(self, details: grpc.HandlerCallDetails) -> Denied | None:
        """A token policy's refusal, decided from the call's metadata alone (before the body is read)."""
        policy = self.policy
        method: str = details.method
        rule = self.rules.get(method)
        if policy.mtls or policy.tokens is None or (rule is not None and rule.public):
            return None
        who = authenticate({}, details.invocation_metadata or (), mtls=False,
                           tokens=policy.tokens)
        if isinstance(who, Refused):
            self._log(method, "-", who.reason)
            return Denied(grpc.StatusCode.UNAUTHENTICATED, f"{method.rsplit('/', 1)[-1]}: {who.reason}")
        assert isinstance(who, Authenticated)
        return self._no_right_anywhere(method, who.principal)

    def _no_right_anywhere(self, method: str, principal: str) -> Denied | None:
        """PERMISSION_DENIED when no ACL entry could let ``principal`` do the method's operation on any group."""
        rule = self.rules.get(method)
        acls = self.policy.acls
        if rule is None or rule.operation is None or acls is None or acls.allows_somewhere(principal, rule.operation):
            return None
        self._log(method, principal, f"{rule.operation.label} on no group")
        return Denied(grpc.StatusCode.PERMISSION_DENIED,
                      f"{principal} may not {rule.operation.label} any group ({method.rsplit('/', 1)[-1]})")

    def before_reading(self, method: str, context: grpc.aio.ServicerContext) -> tuple[str, Denied | None]:
        """The caller's principal, and a refusal decided before the body is read (from the call's metadata
        and TLS handshake): no valid credential, no rule, or no right to the method's operation anywhere."""
        policy = self.policy
        rule = self.rules.get(method)
        if not policy.enabled or (rule is not None and rule.public):
            return "", None
        who = authenticate(context.auth_context(), context.invocation_metadata() or (), mtls=policy.mtls,
                           tokens=policy.tokens)
        if isinstance(who, Refused):
            self._log(method, "-", who.reason)
            return "", Denied(grpc.StatusCode.UNAUTHENTICATED, f"{method.rsplit('/', 1)[-1]}: {who.reason}")
        assert isinstance(who, Authenticated)
        if rule is None:
            return who.principal, None  # ``admit`` refuses it, naming the missing rule
        return who.principal, self._no_right_anywhere(method, who.principal)

    def before_parsing(self, method: str, principal: str, group_id: str, *, id_bytes: int = -1) -> Denied | None:
        """A refusal decided from the group id the body names (its first bytes, ``id_bytes`` long), before
        the rest is decoded."""
        if not self.policy.enabled:
            return None
        rule = self.rules.get(method)
        if rule is None or rule.operation is None:
            return None
        too_long = self._too_long(method, principal, group_id, id_bytes)
        if too_long is not None:
            return too_long
        acls = self.policy.acls
        if acls is not None and not acls.allows(principal, rule.operation, group_id):
            self._log(method, principal, f"{rule.operation.label} on group {quoted(group_id)}")
            return Denied(grpc.StatusCode.PERMISSION_DENIED,
                          f"{principal} may not {rule.operation.label} group {quoted(group_id)} "
                          f"({method.rsplit('/', 1)[-1]})")
        return None

    def _too_long(self, method: str, principal: str, group_id: str, id_bytes: int = -1) -> Denied | None:
        if len(group_id) <= self.max_id_length:
            return None
        size = f"{id_bytes:,} bytes" if id_bytes >= 0 else f"{len(group_id):,} characters"
        self._log(method, principal, f"group id of {size}")
        return Denied(grpc.StatusCode.INVALID_ARGUMENT,
                      f"group_id {quoted(group_id)} is over max_id_length ({self.max_id_length})")

    async def refuse(self, context: grpc.aio.ServicerContext, denied: Denied, read_bytes: int = 0) -> NoReturn:
        """Answer a refusal made before the body was parsed (``read_bytes`` of it read), after the refusal delay."""
        await self._delay.pause(self.refusal_delay_s, read_bytes)
        await context.abort(denied.code, denied.message)
        raise AssertionError("unreachable: abort raises")

    # ------------------------------------------------------------------ the decision

    def admit(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> tuple[str, Rule]:
        """The caller's principal and the method's rule, or ``Denied``. Runs on the loop, so the owners
        it reads are current. A handler may await (off-loop checks) before its step; that leaves no gap,
        because a member id's owner never changes: it is set when the member is created (a static
        instance that re-joins gets a new member id, and the old one is fenced)."""
        policy = self.policy
        rule = self.rules.get(method)
        if rule is not None and rule.public:
            return "", rule
        who = authenticate(context.auth_context(), context.invocation_metadata() or (), mtls=policy.mtls,
                           tokens=policy.tokens)
        if isinstance(who, Refused):
            self._log(method, "-", who.reason)
            raise Denied(grpc.StatusCode.UNAUTHENTICATED, f"{method.rsplit('/', 1)[-1]}: {who.reason}")
        assert isinstance(who, Authenticated)
        principal = who.principal
        if rule is None:
            message = (f"{principal} may not call {method}: the method has no authorization rule "
                       f"(add one to coordinator/auth/guard.py RULES)")
            self._log(method, principal, "no rule")
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, message)
        if rule.operation is None or not isinstance(request, Message):  # unparsable: the handler says so
            return principal, rule
        group_id = rule.group(request) or ""
        too_long = self._too_long(method, principal, group_id)
        if too_long is not None:  # neither remembered by the ACLs nor logged whole
            raise too_long
        acls = policy.acls
        if acls is not None and not acls.allows(principal, rule.operation, group_id):
            self._log(method, principal, f"{rule.operation.label} on group {quoted(group_id)}")
            raise Denied(grpc.StatusCode.PERMISSION_DENIED,
                         f"{principal} may not {rule.operation.label} group {quoted(group_id)} "
                         f"({method.rsplit('/', 1)[-1]})")
        denied = self.members_denied(method, principal, rule, request, group_id)
        if denied is not None:
            raise denied
        return principal, rule

    def members_denied(self, method: str, principal: str, rule: Rule, request: Any, group_id: str) -> Denied | None:
        """PERMISSION_DENIED when ``request`` acts for a member another principal joined (and ``principal`` is
        no admin of the group): asked per request, never cached, as a new member may appear at any time."""
        acls = self.policy.acls
        for member_id, instance_id in rule.members(request):
            owner = self.owner_of(group_id, member_id, instance_id)
            if not owner or owner == principal:
                continue
            if acls is None or not acls.allows(principal, Operation.ADMIN, group_id):
                who_named = f"instance {quoted(instance_id)}" if instance_id else f"member {quoted(member_id)}"
                self._log(method, principal, f"{who_named} of group {quoted(group_id)} belongs to {owner}")
                return Denied(grpc.StatusCode.PERMISSION_DENIED,
                              f"{principal} may not act for {who_named} of group {quoted(group_id)}: another "
                              f"principal joined it ({method.rsplit('/', 1)[-1]}; needs admin on the group)")
        return None

    def _log(self, method: str, principal: str, what: str) -> None:
        self.refusal_log.refused(method, principal, what)

    def may_describe(self, principal: str) -> Callable[[str], bool]:
        acls = self.policy.acls
        return lambda group_id: acls is None or acls.allows(principal, Operation.DESCRIBE, group_id)


def _refuse_unread(denied: Denied, guard: Guard) -> Any:
    """A handler that answers ``denied`` without reading the request: taking the request stream as
    a stream, it never asks for the message, so the body is neither buffered whole nor decoded."""

    async def refuse(_requests: Any, context: grpc.aio.ServicerContext) -> Any:
        await guard.refuse(context, denied)

    return grpc.stream_unary_rpc_method_handler(refuse)


def _wrap(handler: Any, guard: Guard, method: str) -> Any:
    """The same kind of handler, running the guard's check first (and ListGroups' filter after)."""

    async def admit(request: Any, context: grpc.aio.ServicerContext) -> tuple[str, Rule]:
        try:
            return guard.admit(method, request, context)
        except Denied as denied:
            await context.abort(denied.code, denied.message)
            raise AssertionError("unreachable: abort raises") from None

    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            principal, rule = await admit(request, context)
            mark = CURRENT_PRINCIPAL.set(principal)
            try:
                response = await inner(request, context)
            finally:
                CURRENT_PRINCIPAL.reset(mark)
            if rule.filter_response is not None and response is not None:
                response = rule.filter_response(response, guard.may_describe(principal))
            return response

        return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(None, context)
            return await inner_su(requests, context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, request_deserializer=handler.request_deserializer,
                                                    response_serializer=handler.response_serializer)
    takes_request = handler.unary_stream is not None
    inner_stream = handler.unary_stream if takes_request else handler.stream_stream

    async def streaming(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await admit(request_or_iterator if takes_request else None, context)
        result = inner_stream(request_or_iterator, context)
        if inspect.isasyncgen(result):
            async for item in result:
                yield item
        else:  # a coroutine that writes with context.write
            await result

    make = grpc.unary_stream_rpc_method_handler if takes_request else grpc.stream_stream_rpc_method_handler
    return make(streaming, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
