"""A small client for the admin service, following NOT_COORDINATOR across addresses.

Used by the command line, the demo and tests. Errors come back as the
exceptions of ``groupcoord.errors``; a coordinator that cannot be reached is a
``CoordinatorNotAvailableError`` naming every address tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

import grpc

from groupcoord import errors
from groupcoord.addresses import parse_addresses
from groupcoord.assignors.base import TaskSpec
from groupcoord.channels import ClientSecurity, channel_options
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.wire import task_pb

__all__ = ["AdminClient"]


class AdminClient:
    def __init__(
        self, coordinators: str | Sequence[str], *, timeout_s: float = 5.0, security: ClientSecurity | None = None
    ) -> None:
        """``security``: TLS, a client certificate or a token (``groupcoord.channels.ClientSecurity``)."""
        self.addresses = list(parse_addresses(coordinators))
        self.timeout_s = timeout_s
        self.security = security or ClientSecurity()
        self._channels: dict[str, grpc.Channel] = {}

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stub(self, address: str, service: Any = pb_grpc.GroupAdminStub) -> Any:
        if address not in self._channels:
            self._channels[address] = self.security.open_channel(address, channel_options())
        return service(self._channels[address])

    def _call(self, method: str, request: Any, service: Any = pb_grpc.GroupAdminStub) -> Any:
        tried: list[str] = []
        failures: list[str] = []
        queue = list(self.addresses)
        while queue:
            address = queue.pop(0)
            if address in tried:
                continue
            tried.append(address)
            try:
                response = getattr(self._stub(address, service), method)(request, timeout=self.timeout_s)
            except grpc.RpcError as error:
                code = error.code() if hasattr(error, "code") else None
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    detail = error.details() if hasattr(error, "details") else ""
                    tls = any(w in (detail or "").lower() for w in ("ssl", "handshake", "certificate"))
                    failures.append(f"{address} ({code.name.lower()}{': ' + detail if tls else ''})")
                    continue
                detail = error.details() if hasattr(error, "details") else str(error)
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    raise errors.NotAuthenticatedError(f"{method} at {address}: {detail}") from error
                if code == grpc.StatusCode.PERMISSION_DENIED:
                    raise errors.NotAuthorizedError(f"{method} at {address}: {detail}") from error
                raise errors.InvalidRequestError(f"{method} at {address}: {detail}") from error
            if response.error.code == pb.NOT_COORDINATOR:
                hint = response.error.coordinator_hint
                if hint and hint not in tried:
                    queue.insert(0, hint)
                failures.append(f"{address} (standby)")
                continue
            errors.raise_for(response.error)
            return response
        raise errors.CoordinatorNotAvailableError(f"no active coordinator answered at {', '.join(failures)}")

    def list_groups(self) -> list[pb.GroupListing]:
        return list(self._call("ListGroups", pb.ListGroupsRequest()).groups)

    def describe_group(self, group_id: str, *, include_load_snapshot: bool = False) -> pb.DescribeGroupResponse:
        """The group; ``include_load_snapshot`` adds the snapshot's per-task table (large)."""
        request = pb.DescribeGroupRequest(group_id=group_id, include_load_snapshot=include_load_snapshot)
        response: pb.DescribeGroupResponse = self._call("DescribeGroup", request)
        return response

    def put_tasks(
        self, group_id: str, task_ids: Iterable[str], *, replicas: int = 1, pool: str = "", weight: float = 1.0,
        attributes: dict[str, str] | None = None,
    ) -> int:
        specs = (TaskSpec(t, replicas=replicas, pool=pool, weight=weight, attributes=attributes or {}) for t in task_ids)
        return self.put_task_messages(group_id, map(task_pb, specs))

    def put_task_messages(self, group_id: str, tasks: Iterable[pb.Task]) -> int:
        return int(self._call("PutTasks", pb.PutTasksRequest(group_id=group_id, tasks=list(tasks))).num_tasks)

    def delete_tasks(self, group_id: str, task_ids: Iterable[str]) -> int:
        request = pb.DeleteTasksRequest(group_id=group_id, task_ids=list(task_ids))
        return int(self._call("DeleteTasks", request).num_tasks)

    def publish_load_snapshot(self, snapshot: pb.LoadSnapshot) -> None:
        self._call("PublishLoadSnapshot", pb.PublishLoadSnapshotRequest(snapshot=snapshot))

    def delete_group(self, group_id: str) -> None:
        self._call("DeleteGroup", pb.DeleteGroupRequest(group_id=group_id))

    def remove_members(
        self, group_id: str, *, instance_ids: Iterable[str] = (), member_ids: Iterable[str] = ()
    ) -> list[pb.MemberLeaveResponse]:
        """Remove members in one batch LeaveGroup (KIP-345), static ones by instance id; one answer
        each (its ``error`` says whether that member was removed). The group rebalances once."""
        members = [pb.MemberIdentity(instance_id=i) for i in instance_ids]
        members += [pb.MemberIdentity(member_id=m) for m in member_ids]
        request = pb.LeaveGroupRequest(group_id=group_id, members=members)
        response: pb.LeaveGroupResponse = self._call("LeaveGroup", request, pb_grpc.GroupCoordinatorStub)
        return list(response.members)

    def wait_for(
        self, group_id: str, predicate: Callable[[pb.DescribeGroupResponse], bool], timeout_s: float,
        poll_s: float = 0.05,
    ) -> pb.DescribeGroupResponse:
        """Poll DescribeGroup until ``predicate`` holds; raises TimeoutError with the last state."""
        deadline = time.monotonic() + timeout_s
        last: pb.DescribeGroupResponse | None = None
        while True:
            try:
                last = self.describe_group(group_id)
                if predicate(last):
                    return last
            except errors.GroupCoordError:
                pass
            if time.monotonic() >= deadline:
                state = "unknown" if last is None else f"{pb.GroupState.Name(last.state)} gen {last.generation}"
                raise TimeoutError(f"group {group_id!r} did not reach the expected state in {timeout_s}s ({state})")
            time.sleep(poll_s)
