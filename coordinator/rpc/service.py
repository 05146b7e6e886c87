"""gRPC servicers: each RPC becomes one step of the model, carried out by the runtime.

All calls run on the server's event loop thread, so the model needs no locks. A request
whose answer is not ready at once (a held JoinGroup or SyncGroup, or any answer waiting for
its group's store write) waits on a future the runtime completes. An unexpected exception
is logged with its traceback and answered with gRPC INTERNAL; the protocol's own errors
travel in-band as ErrorCodes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar

import grpc
from google.protobuf.message import Message

from groupcoord.coordinator.auth.guard import CURRENT_PRINCIPAL
from groupcoord.coordinator.auth.refusals import quoted
from groupcoord.coordinator.model import consumer_checks, prechecks
from groupcoord.coordinator.model.assignment_check import check_assignment
from groupcoord.coordinator.model.effects import Effect, Token
from groupcoord.coordinator.model.prechecks import Verdict
from groupcoord.coordinator.rpc import parsing
from groupcoord.coordinator.rpc.gate import MAX_FIND_COORDINATOR_GROUPS
from groupcoord.coordinator.rpc.parsing import Malformed
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

__all__ = ["CoordinatorServicer", "AdminServicer", "MAX_FIND_COORDINATOR_GROUPS", "Step", "add_servicer", "peer_host"]

log = logging.getLogger("groupcoord.service")
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def add_servicer(server: grpc.aio.Server, service_name: str, servicer: Any,
                 parse_large: ShardRouter | None = None) -> None:
    """Register ``servicer`` for ``service_name`` (``coordinator.rpc.parsing``): small requests
    are parsed by their deserializer; large ones by the handler itself when ``parse_large`` is
    given (a server without interceptors), else by the ``ParsingInterceptor`` first in the chain."""
    service = pb.DESCRIPTOR.services_by_name[service_name]
    handlers = {
        method.name: parsing.method_handler(service_name, method.name, getattr(servicer, method.name), parse_large)
        for method in service.methods
        if not method.client_streaming  # Session: ``coordinator.rpc.session_stream``
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
        except Exception:
            log.exception("%s failed on %s", method.__name__, type(request).__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"{method.__name__}: internal error (see coordinator log)")

    return wrapper  # type: ignore[return-value]


def _peer_host(context: grpc.aio.ServicerContext) -> str:
    return peer_host(context.peer() or "")


def peer_host(peer: str) -> str:
    """The caller's address without its port, as a JoinGroup records it."""
    # "ipv4:127.0.0.1:5555" / "ipv6:[::1]:5555" -> the address without the port
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rsplit(":", 1)[0].strip("[]")
    return peer


class Step(NamedTuple):
    """A request's model step, ready to run on the loop: its shard's runtime, the step, its answer's type."""

    runtime: CoordinatorRuntime
    step: Callable[[Token], list[Effect]]
    response_type: type[Message]


async def _ask(runtime: CoordinatorRuntime, step: Callable[[Token], list[Effect]], response_type: type[Message]) -> Any:
    """Run ``step`` and wait for its answer (most answers are ready at once: no future then)."""
    ready: list[Message] = []
    future: asyncio.Future[Message] | None = None

    def answer(response: Message) -> None:
        if future is None:
            ready.append(response)
        elif not future.done():  # the caller may have gone (cancelled)
            future.set_result(response)

    runtime.submit(step, response_type, answer)
    if ready:
        return ready[0]
    future = asyncio.get_running_loop().create_future()
    return await future



_CHECK_OFF_LOOP_FROM = 1_000
"""Entries (replicas, tasks, report entries) from which a request is checked on a checker thread;
smaller ones are checked by the model step on the loop: a thread hop would cost more than the check."""


def _replicas(request: pb.SyncGroupRequest) -> int:
    return sum(len(a.tasks) for a in request.assignments) + sum(len(s.children) for s in request.splits)


class CoordinatorServicer(pb_grpc.GroupCoordinatorServicer):
    """Each request goes to its group's shard's runtime (the only one, unsharded)."""

    def __init__(self, router: ShardRouter) -> None:
        self.router = router

    def on_loop(self, method_name: str, request: Any, host: str, principal: str) -> Step | None:
        """The model step of a Session stream's request whose twin checks nothing off the loop first, so the
        stream steps it from its reader with no task of its own (None: run the twin, which does that). The
        twins below build their steps here: the same step either way."""
        runtime = self.router.for_group(request.group_id)
        if method_name == "JoinGroup":
            return self._join(runtime, request, host, principal)
        if method_name == "SyncGroup":
            return None if self._sync_inputs(runtime, request) is not None else self._sync(runtime, request, None)
        if method_name == "Heartbeat":
            return self._heartbeat(runtime, request)
        if method_name == "LeaveGroup":
            return self._leave(runtime, request)
        if method_name == "ReportLoad":
            return None if len(request.report.tasks) >= _CHECK_OFF_LOOP_FROM else self._report(runtime, request, None)
        if method_name == "GroupHeartbeat":
            if len(request.owned.tasks) >= _CHECK_OFF_LOOP_FROM:
                return None
            return self._group_heartbeat(runtime, request, host, principal, None)
        return None

    @staticmethod
    def _join(runtime: CoordinatorRuntime, request: pb.JoinGroupRequest, host: str, principal: str) -> Step:
        return Step(runtime, lambda token: runtime.model.join(request, token, host, principal), pb.JoinGroupResponse)

    @staticmethod
    def _heartbeat(runtime: CoordinatorRuntime, request: pb.HeartbeatRequest) -> Step:
        return Step(runtime, lambda token: runtime.model.heartbeat(request, token), pb.HeartbeatResponse)

    @staticmethod
    def _leave(runtime: CoordinatorRuntime, request: pb.LeaveGroupRequest) -> Step:
        return Step(runtime, lambda token: runtime.model.leave(request, token), pb.LeaveGroupResponse)

    @staticmethod
    def _sync_inputs(runtime: CoordinatorRuntime, request: pb.SyncGroupRequest) -> Any:
        """What a current leader's large assignment is checked against on a checker thread (None: the step checks
        it, or it is not that)."""
        if len(request.assignments) + len(request.splits) == 0 or _replicas(request) < _CHECK_OFF_LOOP_FROM:
            return None
        return runtime.model.assignment_inputs(request)

    @staticmethod
    def _sync(runtime: CoordinatorRuntime, request: pb.SyncGroupRequest, checked: Any) -> Step:
        return Step(runtime, lambda token: runtime.model.sync(request, token, checked), pb.SyncGroupResponse)

    @staticmethod
    def _report(runtime: CoordinatorRuntime, request: pb.ReportLoadRequest, checked: Verdict | None) -> Step:
        return Step(runtime, lambda token: runtime.model.report_load(request, token, checked), pb.ReportLoadResponse)

    @staticmethod
    def _group_heartbeat(runtime: CoordinatorRuntime, request: pb.GroupHeartbeatRequest, host: str, principal: str,
                         checked: Verdict | None) -> Step:
        return Step(runtime, lambda token: runtime.model.group_heartbeat(request, token, host, principal, checked),
                    pb.GroupHeartbeatResponse)

    @_guarded
    async def JoinGroup(self, request: pb.JoinGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        principal = CURRENT_PRINCIPAL.get()  # set by the guard (coordinator.auth) when it is on
        return await _ask(*self._join(self.router.for_group(request.group_id), request, _peer_host(context), principal))

    @_guarded
    async def SyncGroup(self, request: pb.SyncGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        checked = None
        runtime = self.router.for_group(request.group_id)
        inputs = self._sync_inputs(runtime, request)  # a leader's, still current: checked on a thread
        if inputs is not None:
            checked = await runtime.checkers.run(check_assignment, runtime.config, inputs, request)
        return await _ask(*self._sync(runtime, request, checked))

    @_guarded
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext) -> Any:
        runtime = self.router.for_group(request.group_id)
        answer = runtime.quick_heartbeat(request)  # nearly every heartbeat: answered at once, no step
        if answer is not None:
            return answer
        return await _ask(*self._heartbeat(runtime, request))

    @_guarded
    async def LeaveGroup(self, request: pb.LeaveGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        return await _ask(*self._leave(self.router.for_group(request.group_id), request))

    @_guarded
    async def ReportLoad(self, request: pb.ReportLoadRequest, context: grpc.aio.ServicerContext) -> Any:
        checked = None
        runtime = self.router.for_group(request.group_id)
        if len(request.report.tasks) >= _CHECK_OFF_LOOP_FROM:
            checked = Verdict(await runtime.checkers.run(prechecks.report_error, runtime.config, request))
        return await _ask(*self._report(runtime, request, checked))

    @_guarded
    async def GroupHeartbeat(self, request: pb.GroupHeartbeatRequest, context: grpc.aio.ServicerContext) -> Any:
        """The consumer protocol (``coordinator.model.consumer``), persisted with its group's record, so an
        HA failover or a shard move resumes it where the store has it (``ConsumerGroups.resume``)."""
        runtime = self.router.for_group(request.group_id)
        host = _peer_host(context)
        principal = CURRENT_PRINCIPAL.get()
        checked = None
        if len(request.owned.tasks) >= _CHECK_OFF_LOOP_FROM:
            checked = Verdict(await runtime.checkers.run(consumer_checks.request_error, runtime.config, request))
        return await _ask(*self._group_heartbeat(runtime, request, host, principal, checked))

    @_guarded
    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext) -> Any:
        """Answered from memory by any coordinator, in office or not (no model step, no store)."""
        if len(request.group_ids) > MAX_FIND_COORDINATOR_GROUPS:
            return pb.FindCoordinatorResponse(error=pb.Error(
                code=pb.INVALID_REQUEST,
                message=f"group_ids: {len(request.group_ids)} ids, at most {MAX_FIND_COORDINATOR_GROUPS} per request"))
        longest = self.router.config.max_id_length
        for index, group_id in enumerate(request.group_ids):  # refused whole: nothing echoed, nothing remembered
            if len(group_id) > longest:
                return pb.FindCoordinatorResponse(error=pb.Error(code=pb.INVALID_REQUEST, message=(
                    f"group_ids[{index}] {quoted(group_id)} is over max_id_length ({longest})")))
        return pb.FindCoordinatorResponse(coordinators=[self.router.locate(g) for g in request.group_ids])


class AdminServicer(pb_grpc.GroupAdminServicer):
    def __init__(self, router: ShardRouter) -> None:
        self.router = router

    @_guarded
    async def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext) -> Any:
        """Sharded: the groups of every shard this process leads and has loaded (others: ask their leaders)."""
        answers = [await _ask(r, functools.partial(r.model.list_groups, request), pb.ListGroupsResponse)
                   for r in self.router.runtimes]
        if len(answers) == 1:
            return answers[0]
        merged = pb.ListGroupsResponse()
        for answer in answers:
            if answer.error.code == pb.NONE:
                merged.groups.extend(answer.groups)
        return merged

    @_guarded
    async def DescribeGroup(self, request: pb.DescribeGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        runtime = self.router.for_group(request.group_id)
        return await _ask(runtime, lambda token: runtime.model.describe_group(request, token), pb.DescribeGroupResponse)

    @_guarded
    async def PutTasks(self, request: pb.PutTasksRequest, context: grpc.aio.ServicerContext) -> Any:
        checked = None
        runtime = self.router.for_group(request.group_id)
        if len(request.tasks) >= _CHECK_OFF_LOOP_FROM:
            base = runtime.catalog_snapshot(request.group_id)  # compared with, off the loop
            checked = await runtime.checkers.run(prechecks.check_catalog, runtime.config, request.tasks, base)
        principal = CURRENT_PRINCIPAL.get()  # its quotas (max_groups_per_principal, max_tasks_per_principal)
        return await _ask(runtime, lambda token: runtime.model.put_tasks(request, token, checked, principal),
                          pb.PutTasksResponse)

    @_guarded
    async def DeleteTasks(self, request: pb.DeleteTasksRequest, context: grpc.aio.ServicerContext) -> Any:
        runtime = self.router.for_group(request.group_id)
        return await _ask(runtime, lambda token: runtime.model.delete_tasks(request, token), pb.DeleteTasksResponse)

    @_guarded
    async def PublishLoadSnapshot(
        self, request: pb.PublishLoadSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        checked = None
        runtime = self.router.for_group(request.snapshot.group_id)
        if len(request.snapshot.tasks) + len(request.snapshot.workers) >= _CHECK_OFF_LOOP_FROM:
            checked = Verdict(await runtime.checkers.run(prechecks.snapshot_error, runtime.config, request,
                                                         runtime.clock.wall_ms()))
        return await _ask(runtime, lambda token: runtime.model.publish_load_snapshot(request, token, checked),
                          pb.PublishLoadSnapshotResponse)

    @_guarded
    async def DescribeCluster(self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext) -> Any:
        return self.router.describe_cluster()

    @_guarded
    async def DeleteGroup(self, request: pb.DeleteGroupRequest, context: grpc.aio.ServicerContext) -> Any:
        runtime = self.router.for_group(request.group_id)
        principal = CURRENT_PRINCIPAL.get()  # its name's admin may delete a group another principal created
        return await _ask(runtime, lambda token: runtime.model.delete_group(request, token, principal),
                          pb.DeleteGroupResponse)
