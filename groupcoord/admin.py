"""A small client for the admin service: every group's requests at its coordinator.

Used by the command line, the demo and tests. A call naming one group goes to the coordinator
that leads the group's shard, found with FindCoordinator at the given addresses (any
coordinators of the cluster) and cached per group; NOT_COORDINATOR follows the hint once, then
asks again; COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE are retried after a short
backoff until the call's ``timeout_s`` (docs/sharding-protocol.md, "What a client does"). A
coordinator without FindCoordinator (an older version) is used as before: the addresses in
turn, following NOT_COORDINATOR. ``list_all_groups`` and ``describe_whole_cluster`` ask every
coordinator of a sharded cluster and merge. Errors come back as the exceptions of
``groupcoord.errors``; a coordinator that cannot be reached is a ``CoordinatorNotAvailableError``
naming every address tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

import grpc

from groupcoord import errors
from groupcoord.addresses import KnownCoordinators, parse_addresses, reachable_address
from groupcoord.admin_results import (
    ClusterListing,
    ClusterView,
    CoordinatorUnreachableError,
    Unimplemented,
    Unreachable,
    check_reachable,
    none_answered,
)
from groupcoord.assignors.base import TaskSpec
from groupcoord.channels import ClientSecurity, channel_options, failure_reason
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.wire import task_pb

__all__ = ["AdminClient", "ClusterListing", "ClusterView", "CoordinatorUnreachableError"]

_RETRY_HERE = frozenset({pb.COORDINATOR_LOAD_IN_PROGRESS})
_ASK_AGAIN = frozenset({pb.NOT_COORDINATOR, pb.COORDINATOR_NOT_AVAILABLE})

class AdminClient:
    def __init__(
        self, coordinators: str | Sequence[str], *, timeout_s: float = 5.0, security: ClientSecurity | None = None,
        retry_backoff_s: float = 0.1, sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic, connect_timeout_s: float = 1.0,
        retry_unreachable: bool = True,
    ) -> None:
        """``coordinators``: any coordinators of the cluster (the bootstrap list; the others are learnt
        from their answers). ``security``: TLS, a client certificate or a token
        (``groupcoord.channels.ClientSecurity``). ``connect_timeout_s``: how long a new connection may
        take before its address counts as unreachable. ``retry_unreachable``: when no address can be
        reached at all, try again until ``timeout_s`` (a coordinator restarting) or, False, say why at
        once (the command line: a wrong address is the likelier cause)."""
        self.addresses = list(parse_addresses(coordinators))
        self.known = KnownCoordinators(self.addresses)
        self.connect_timeout_s = connect_timeout_s
        self.retry_unreachable = retry_unreachable
        self._connected: set[str] = set()
        self.timeout_s = timeout_s
        self.security = security or ClientSecurity()
        self._channels: dict[str, grpc.Channel] = {}
        self._located: dict[str, str] = {}  # group id -> its coordinator's address, as last found
        self._lookup = True  # False once a coordinator answered FindCoordinator UNIMPLEMENTED
        self._found_at = self.addresses[0]  # the address that answered the last FindCoordinator
        self._backoff_s = retry_backoff_s
        self._sleep = sleep
        self._monotonic = monotonic
        self.answered_by = ""
        """The address that answered the last call made through the address list."""

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

    def _rpc(self, address: str, method: str, request: Any, service: Any = pb_grpc.GroupAdminStub) -> Any:
        """One call; ``Unreachable`` when it did not reach a coordinator, the errors' classes otherwise."""
        stub = self._stub(address, service)
        slow = address not in self._connected and check_reachable(
            self._channels[address], address, min(self.connect_timeout_s, self.timeout_s))
        try:
            response = getattr(stub, method)(request, timeout=self.timeout_s, wait_for_ready=slow or None)
        except grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else None
            detail = (error.details() if hasattr(error, "details") else str(error)) or ""
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                self._connected.discard(address)
                raise Unreachable(failure_reason(code, detail)) from error
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise Unimplemented(f"{method} at {address}: not implemented (an older coordinator)") from error
            if code == grpc.StatusCode.UNAUTHENTICATED:
                raise errors.NotAuthenticatedError(f"{method} at {address}: {detail}") from error
            if code == grpc.StatusCode.PERMISSION_DENIED:
                raise errors.NotAuthorizedError(f"{method} at {address}: {detail}") from error
            raise errors.InvalidRequestError(f"{method} at {address}: {detail}") from error
        self._connected.add(address)
        return response

    def _call(self, method: str, request: Any, service: Any = pb_grpc.GroupAdminStub) -> Any:
        """``method`` at the first of the addresses that answers as the coordinator, following hints."""
        tried: list[str] = []
        failures: list[str] = []
        unreachable = 0
        queue = self.known.candidates()
        while queue:
            address = queue.pop(0)
            if address in tried:
                continue
            tried.append(address)
            try:
                response = self._rpc(address, method, request, service)
            except Unreachable as failure:
                failures.append(f"{address} ({failure})")
                unreachable += 1
                continue
            except Unimplemented as failure:
                raise errors.InvalidRequestError(str(failure)) from failure
            if response.error.code == pb.NOT_COORDINATOR:
                hint = response.error.coordinator_hint
                if hint and hint not in tried:
                    queue.insert(0, hint)
                failures.append(f"{address} (standby)")
                continue
            errors.raise_for(response.error)
            self.answered_by = address
            return response
        raise none_answered(failures, unreachable == len(failures))

    # ------------------------------------------------------------------ one group, at its coordinator

    def find_coordinators(self, group_ids: Sequence[str]) -> list[pb.CoordinatorLocation]:
        """FindCoordinator for ``group_ids`` (batched, 1,000 per call) at the first address that answers;
        each entry's address is where that group's requests go (or its error)."""
        try:
            return self._find(group_ids)
        except Unimplemented as failure:
            raise errors.InvalidRequestError(str(failure)) from failure

    def _find(self, group_ids: Sequence[str]) -> list[pb.CoordinatorLocation]:
        found: list[pb.CoordinatorLocation] = []
        ids = list(group_ids)
        for start in range(0, len(ids), 1000):
            request = pb.FindCoordinatorRequest(group_ids=ids[start:start + 1000])
            failures: list[str] = []
            for address in self.known.candidates():
                try:
                    response: pb.FindCoordinatorResponse = self._rpc(address, "FindCoordinator", request,
                                                                     pb_grpc.GroupCoordinatorStub)
                except Unreachable as failure:
                    failures.append(f"{address} ({failure})")
                    continue
                errors.raise_for(response.error)
                self._found_at = address
                for entry in response.coordinators:
                    if entry.address:
                        entry.address = reachable_address(entry.address, address)
                self.known.learn((e.address for e in response.coordinators), every_live=False)
                found.extend(response.coordinators)
                break
            else:
                raise none_answered(failures, unreachable=True)
        return found

    def _coordinator_of(self, group_id: str, deadline: float) -> str | None:
        """The group's coordinator (cached, else FindCoordinator); None: no FindCoordinator (older)."""
        if group_id in self._located:
            return self._located[group_id]
        while True:
            try:
                entry = self._find([group_id])[0]
            except Unimplemented:
                self._lookup = False
                return None
            except errors.CoordinatorNotAvailableError as unanswered:  # no address answered: again, until the deadline
                if self._monotonic() >= deadline or (
                        isinstance(unanswered, CoordinatorUnreachableError) and not self.retry_unreachable):
                    raise
                self._sleep(self._backoff_s)
                continue
            failure = errors.error_for(entry.error)
            if failure is None:
                self._located[group_id] = entry.address
                return entry.address
            if isinstance(failure, errors.GroupAuthorizationFailedError):
                return self._found_at  # the request's own refusal there names the principal and the operation
            if not isinstance(failure, errors.CoordinatorNotAvailableError) or self._monotonic() >= deadline:
                raise failure
            self._sleep(self._backoff_s)

    def _group_call(self, group_id: str, method: str, request: Any, service: Any = pb_grpc.GroupAdminStub) -> Any:
        """``method`` for ``group_id`` at its coordinator (see the module's docstring for the retries)."""
        if not self._lookup or not group_id:
            return self._call(method, request, service)
        deadline = self._monotonic() + self.timeout_s
        hinted = False
        while True:
            address = self._coordinator_of(group_id, deadline)
            if address is None:
                return self._call(method, request, service)
            try:
                response = self._rpc(address, method, request, service)
            except Unreachable as failure:
                self._located.pop(group_id, None)
                if self._monotonic() >= deadline:
                    raise errors.CoordinatorNotAvailableError(
                        f"{method} for group {group_id}: its coordinator {address} did not answer ({failure})"
                    ) from None
                self._sleep(self._backoff_s)
                continue
            except Unimplemented as failure:
                raise errors.InvalidRequestError(str(failure)) from failure
            code = response.error.code
            if code not in _RETRY_HERE and code not in _ASK_AGAIN:
                errors.raise_for(response.error)
                return response
            if code in _ASK_AGAIN:
                hint = response.error.coordinator_hint
                if code == pb.NOT_COORDINATOR and hint and hint != address and not hinted:
                    self._located[group_id] = hint  # the new leader, as the old one knows it: at once
                    hinted = True
                    continue
                self._located.pop(group_id, None)
                hinted = False
            if self._monotonic() >= deadline:
                errors.raise_for(response.error)
            self._sleep(self._backoff_s)

    # ------------------------------------------------------------------ the cluster

    def describe_cluster(self, address: str | None = None) -> pb.DescribeClusterResponse:
        """One coordinator's view of the cluster (``address``, else the first of the list that answers)."""
        request = pb.DescribeClusterRequest()
        if address is None:
            response: pb.DescribeClusterResponse = self._cluster_call("DescribeCluster", request)
            self.known.learn((reachable_address(c.address, self.answered_by) for c in response.coordinators),
                             every_live=True)
            return response
        try:
            answer: pb.DescribeClusterResponse = self._rpc(address, "DescribeCluster", request)
        except Unreachable as failure:
            raise errors.CoordinatorNotAvailableError(f"DescribeCluster at {address}: {failure}") from None
        except Unimplemented as failure:
            raise errors.InvalidRequestError(str(failure)) from failure
        errors.raise_for(answer.error)
        return answer

    def _cluster_call(self, method: str, request: Any) -> Any:
        """A question any coordinator answers: the first address that does."""
        failures: list[str] = []
        for address in self.known.candidates():
            try:
                response = self._rpc(address, method, request)
            except Unreachable as failure:
                failures.append(f"{address} ({failure})")
                continue
            except Unimplemented as failure:
                raise errors.InvalidRequestError(str(failure)) from failure
            errors.raise_for(response.error)
            self.answered_by = address
            return response
        raise none_answered(failures, unreachable=True)

    def _leaders(self, cluster: pb.DescribeClusterResponse) -> list[str]:
        """The coordinators leading shards, as reachable from here."""
        return [reachable_address(c.address, self.answered_by) for c in cluster.coordinators if c.shards_led > 0]

    def list_all_groups(self) -> ClusterListing:
        """Every group of the cluster: ListGroups at every coordinator that leads shards, merged (a
        group is listed once). Raises only when no coordinator answered."""
        try:
            cluster = self.describe_cluster()
        except errors.InvalidRequestError:  # an older coordinator: no DescribeCluster
            return ClusterListing(list(self._call("ListGroups", pb.ListGroupsRequest()).groups))
        if cluster.mode != "sharded":
            return ClusterListing(list(self._call("ListGroups", pb.ListGroupsRequest()).groups))
        listing = ClusterListing([], leaderless_shards=sum(1 for s in cluster.shard_infos if not s.leader))
        seen: set[str] = set()
        answered = 0
        for address in self._leaders(cluster):
            try:
                response: pb.ListGroupsResponse = self._rpc(address, "ListGroups", pb.ListGroupsRequest())
            except (Unreachable, Unimplemented) as failure:
                listing.failed[address] = str(failure)
                continue
            if response.error.code != pb.NONE:
                listing.failed[address] = f"{errors.code_name(response.error.code)}: {response.error.message}"
                continue
            answered += 1
            for group in response.groups:
                if group.group_id not in seen:
                    seen.add(group.group_id)
                    listing.groups.append(group)
        if not answered and listing.failed:
            raise errors.CoordinatorNotAvailableError(
                "no coordinator answered ListGroups: " + ", ".join(f"{a} ({why})" for a, why in listing.failed.items()))
        listing.groups.sort(key=lambda g: g.group_id)
        return listing

    def describe_whole_cluster(self) -> ClusterView:
        """Every coordinator's DescribeCluster, merged: each shard as its leader sees it (its groups and
        members), the moves of every coordinator."""
        first = self.describe_cluster()
        asked = self.answered_by
        views: dict[str, pb.DescribeClusterResponse] = {}
        failed: dict[str, str] = {}
        for coordinator in first.coordinators:
            address = reachable_address(coordinator.address, asked)
            if coordinator.self:
                views[coordinator.address] = first
                continue
            try:
                views[coordinator.address] = self.describe_cluster(address)
            except errors.GroupCoordError as failure:
                failed[coordinator.address] = str(failure)
        shard_infos = []
        for info in first.shard_infos:
            own = views.get(info.leader)
            if own is not None and info.shard < len(own.shard_infos) and own.shard_infos[info.shard].leader == info.leader:
                info = own.shard_infos[info.shard]
            shard_infos.append(info)
        moves = sorted((m for view in views.values() for m in view.moves), key=lambda m: m.shard)
        return ClusterView(first.mode, first.shards, asked, list(first.coordinators), shard_infos, moves, failed)

    def list_groups(self) -> list[pb.GroupListing]:
        """Every group of the cluster (``list_all_groups`` also says which coordinators did not answer)."""
        return self.list_all_groups().groups

    def describe_group(self, group_id: str, *, include_load_snapshot: bool = False) -> pb.DescribeGroupResponse:
        """The group; ``include_load_snapshot`` adds the snapshot's per-task table (large)."""
        request = pb.DescribeGroupRequest(group_id=group_id, include_load_snapshot=include_load_snapshot)
        response: pb.DescribeGroupResponse = self._group_call(group_id, "DescribeGroup", request)
        return response

    def put_tasks(
        self, group_id: str, task_ids: Iterable[str], *, replicas: int = 1, pool: str = "", weight: float = 1.0,
        attributes: dict[str, str] | None = None,
    ) -> int:
        specs = (TaskSpec(t, replicas=replicas, pool=pool, weight=weight, attributes=attributes or {}) for t in task_ids)
        return self.put_task_messages(group_id, map(task_pb, specs))

    def put_task_messages(self, group_id: str, tasks: Iterable[pb.Task]) -> int:
        return int(self._group_call(group_id, "PutTasks", pb.PutTasksRequest(group_id=group_id,
                                                                           tasks=list(tasks))).num_tasks)

    def delete_tasks(self, group_id: str, task_ids: Iterable[str]) -> int:
        request = pb.DeleteTasksRequest(group_id=group_id, task_ids=list(task_ids))
        return int(self._group_call(group_id, "DeleteTasks", request).num_tasks)

    def publish_load_snapshot(self, snapshot: pb.LoadSnapshot) -> None:
        self._group_call(snapshot.group_id, "PublishLoadSnapshot", pb.PublishLoadSnapshotRequest(snapshot=snapshot))

    def delete_group(self, group_id: str) -> None:
        self._group_call(group_id, "DeleteGroup", pb.DeleteGroupRequest(group_id=group_id))

    def remove_members(
        self, group_id: str, *, instance_ids: Iterable[str] = (), member_ids: Iterable[str] = ()
    ) -> list[pb.MemberLeaveResponse]:
        """Remove members in one batch LeaveGroup (KIP-345), static ones by instance id; one answer
        each (its ``error`` says whether that member was removed). The group rebalances once."""
        members = [pb.MemberIdentity(instance_id=i) for i in instance_ids]
        members += [pb.MemberIdentity(member_id=m) for m in member_ids]
        request = pb.LeaveGroupRequest(group_id=group_id, members=members)
        response: pb.LeaveGroupResponse = self._group_call(group_id, "LeaveGroup", request, pb_grpc.GroupCoordinatorStub)
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
