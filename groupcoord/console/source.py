"""The console's one way to the cluster: the admin client, off the event loop, cached and shared.

Every open page polls, and many pages may show the same group: each answer is kept for
``ttl_s`` and asked once however many pages wait for it (one call in flight per question), so
the coordinators see at most one DescribeGroup per group per ``ttl_s`` and one ListGroups for
the whole console. Calls run one at a time on one thread (the admin client is blocking and keeps
per-group caches). Memory is bounded: at most ``max_described`` descriptions are kept, least
recently used forgotten first, and the rebalance history has its own bounds.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from groupcoord.admin import AdminClient, ClusterListing, ClusterView
from groupcoord.console.history import RebalanceHistory
from groupcoord.console.views import observation
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ClusterSource", "Planner"]

T = TypeVar("T")


class Planner(Protocol):
    """What ``groups plan`` would propose for the group now (a JSON-ready dict), or None when its
    assignor cannot say (no assignor yet, not installed here)."""

    def __call__(self, response: pb.DescribeGroupResponse) -> dict[str, Any] | None: ...


class ClusterSource:
    def __init__(self, admin: AdminClient, *, planner: Planner | None = None, ttl_s: float = 0.5,
                 refresh_s: float = 10.0, max_described: int = 512,
                 monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.admin = admin
        self.history = RebalanceHistory()
        self._planner = planner
        self._ttl_s = ttl_s
        self._refresh_s = refresh_s
        self._max = max_described
        self._monotonic = monotonic
        self._wall = wall
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="console-admin")
        self._kept: OrderedDict[Any, tuple[float, Any]] = OrderedDict()
        self._in_flight: dict[Any, asyncio.Future[Any]] = {}

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.admin.close()

    async def _run(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _cached(self, key: Any, max_age_s: float, fetch: Callable[[], Awaitable[T]]) -> T:
        """The answer kept for ``key`` if younger than ``max_age_s``, else one fetch shared by every waiter."""
        kept = self._kept.get(key)
        if kept is not None and self._monotonic() - kept[0] < max_age_s:
            self._kept.move_to_end(key)
            value: T = kept[1]
            return value
        pending = self._in_flight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(fetch())
            self._in_flight[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done))
        return await asyncio.shield(pending)

    def _settle(self, key: Any, done: asyncio.Future[Any]) -> None:
        self._in_flight.pop(key, None)
        if not done.cancelled() and done.exception() is None:
            self._kept[key] = (self._monotonic(), done.result())
            self._kept.move_to_end(key)
            while len(self._kept) > self._max:
                self._kept.popitem(last=False)

    async def listing(self) -> ClusterListing:
        """Every group of the cluster (one ListGroups per coordinator leading shards, shared)."""
        return await self._cached("listing", self._ttl_s, lambda: self._run(self.admin.list_all_groups))

    async def cluster(self) -> ClusterView:
        return await self._cached("cluster", self._ttl_s, lambda: self._run(self.admin.describe_whole_cluster))

    async def describe(self, group_id: str, *, with_task_stats: bool = False,
                       max_age_s: float | None = None) -> pb.DescribeGroupResponse:
        """The group now; every description fetched also feeds the rebalance history."""
        async def fetch() -> pb.DescribeGroupResponse:
            response = await self._run(lambda: self.admin.describe_group(
                group_id, include_load_snapshot=with_task_stats))
            self.history.observe(group_id, observation(response), self._wall())
            return response

        age = self._ttl_s if max_age_s is None else max_age_s
        return await self._cached(("describe", group_id, with_task_stats), age, fetch)

    async def describe_listed(self, listing: pb.GroupListing) -> pb.DescribeGroupResponse:
        """A listed group's description: the kept one while the listing shows it unchanged (same
        generation, state and member count) and it is younger than ``refresh_s``, else a new one."""
        kept = self._kept.get(("describe", listing.group_id, False))
        if kept is not None:
            described: pb.DescribeGroupResponse = kept[1]
            same = (described.generation, described.state, len(described.members)) == (
                listing.generation, listing.state, listing.num_members)
            if same and self._monotonic() - kept[0] < self._refresh_s:
                return described
        return await self.describe(listing.group_id, max_age_s=0.0)

    async def plan(self, response: pb.DescribeGroupResponse) -> dict[str, Any] | None:
        """The planner's proposal for the group as ``response`` shows it (kept per generation and snapshot)."""
        planner = self._planner
        if planner is None:
            return None
        key = ("plan", response.group_id, response.generation, response.load_snapshot.snapshot_id)
        return await self._cached(key, self._refresh_s, lambda: self._run(lambda: planner(response)))

    async def remove_members(self, group_id: str, member_ids: list[str]) -> list[pb.MemberLeaveResponse]:
        """LeaveGroup for ``member_ids``, as the principal the console runs as (its ACLs apply)."""
        answers = await self._run(lambda: self.admin.remove_members(group_id, member_ids=member_ids))
        for key in [k for k in self._kept if isinstance(k, tuple) and k[:2] == ("describe", group_id)]:
            del self._kept[key]
        self._kept.pop("listing", None)
        return answers
