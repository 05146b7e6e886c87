"""The runtimes of one process, one per shard, and which one answers a group.

Kafka's ``CoordinatorRuntime`` keeps one context per ``__consumer_offsets`` partition, each with
its own state (loading, active, closed) and epoch; we keep one ``CoordinatorRuntime`` per shard,
each with its own office (the shard's election), store (the shard's znodes, fenced by its epoch),
model, timers and write queues. So a shard loads, unloads, or has its writes fenced without
touching any other: one shard's trouble never reaches another's groups. The runtimes share the
process's event loop, clock, store writer threads, checker threads, lag monitor and metrics.

An unsharded coordinator (standalone, or active/standby) is a router of one runtime, whose cluster
is read off its office (``coordinator.runtime.discovery.OfficeView``); a sharded one reads its cluster
in ZooKeeper (``coordinator.ha.shard_election``). Either way FindCoordinator and DescribeCluster are
answered by ``coordinator.runtime.discovery``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from groupcoord.coordinator.clock import Clock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.runtime import discovery
from groupcoord.coordinator.runtime.discovery import ClusterView, OfficeView
from groupcoord.coordinator.runtime.metrics import ShardCollector, ShardFigures
from groupcoord.coordinator.runtime.office import Office, Standalone
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime, SampleSink
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.coordinator.runtime.shared import ProcessParts, WithProcessParts
from groupcoord.coordinator.runtime.writers import ThreadWriter
from groupcoord.coordinator.storage.store import GroupStore
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ClusterView", "ShardRouter", "as_router"]


class ShardRouter(WithProcessParts):
    """Routes each group to its shard's runtime; answers the questions about the whole process."""

    def __init__(self, runtimes: Sequence[CoordinatorRuntime], *, view: ClusterView | None = None) -> None:
        """``view``: the cluster in ZooKeeper (sharded, required for several runtimes); none: the only
        runtime's office tells (``OfficeView``). Every runtime must share one ``ProcessParts``."""
        if not runtimes:
            raise ValueError("a router needs at least one runtime")
        self.runtimes = list(runtimes)
        self.shards = len(self.runtimes)
        self.parts = self.runtimes[0].parts
        if any(runtime.parts is not self.parts for runtime in self.runtimes):
            raise ValueError("the runtimes of one router share one ProcessParts (ShardRouter.build)")
        if view is None and self.shards > 1:
            raise ValueError("a router of several shards needs the cluster's view")
        self.sharded = view is not None
        self.view: ClusterView = view or OfficeView(self.runtimes[0].office, lambda: self.advertised)
        #: this process's address for clients (host:port), answered by FindCoordinator; set by the server
        self.advertised = ""
        if self.shards > 1:
            self.metrics.bind(self._all_groups, _AnyInOffice(self.runtimes), now=self.clock.now,
                              wall_ms=self.clock.wall_ms)
            self.metrics.registry.register(ShardCollector(self.metrics, self._shard_figures))

    @classmethod
    def build(cls, offices: Sequence[Office], stores: Sequence[GroupStore], *, view: ClusterView,
              config: CoordinatorConfig | None = None, clock: Clock | None = None,
              on_load_report: SampleSink | None = None,
              account_of: Callable[[str, str], str] | None = None) -> ShardRouter:
        """One runtime per (office, store) pair, sharing one clock, lag monitor, checker pool, metrics
        and byte budget for large requests (``ProcessParts``)."""
        parts = ProcessParts.for_process(config, clock)
        runtimes = [CoordinatorRuntime(store=store, office=office, on_load_report=on_load_report, parts=parts,
                                       label=f"shard {shard}: ", account_of=account_of)
                    for shard, (office, store) in enumerate(zip(offices, stores, strict=True))]
        return cls(runtimes, view=view)

    # ------------------------------------------------------------------ routing

    def shard_of(self, group_id: str) -> int:
        return shard_of(group_id, self.shards)

    def for_group(self, group_id: str) -> CoordinatorRuntime:
        return self.runtimes[shard_of(group_id, self.shards)]

    def member_principal(self, group_id: str, member_id: str, instance_id: str = "") -> str | None:
        """The guard's owner lookup, in the group's shard."""
        return self.for_group(group_id).model.member_principal(group_id, member_id, instance_id)

    def _shard_figures(self) -> list[ShardFigures]:
        """Each shard's gauges (the loop's thread: ``ShardCollector`` reads them there)."""
        figures = []
        for shard, runtime in enumerate(self.runtimes):
            groups = runtime.model.groups
            figures.append(ShardFigures(shard, runtime.office.in_office(), runtime.office.term(), len(groups),
                                        runtime.member_count(), runtime.last_load_s))
        return figures

    def _all_groups(self) -> dict[str, Group]:
        return {g: group for runtime in self.runtimes for g, group in runtime.model.groups.items()}

    # ------------------------------------------------------------------ life

    def load(self) -> int:
        """Resume every stored group of every runtime now (a coordinator without an election); returns how many."""
        return sum(runtime.load() for runtime in self.runtimes)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every runtime on ``loop``, sharing one pool of store writer threads."""
        writer = ThreadWriter(loop.call_soon_threadsafe)
        for runtime in self.runtimes:
            runtime.attach(loop, writer)

    def release_parked(self) -> None:
        for runtime in self.runtimes:
            runtime.release_parked()

    def close_writers(self) -> None:
        for writer in {id(r.writer): r.writer for r in self.runtimes}.values():
            writer.close()

    def waiting(self) -> int:
        return sum(runtime.waiting() for runtime in self.runtimes)

    # ------------------------------------------------------------------ discovery

    def locate(self, group_id: str) -> pb.CoordinatorLocation:
        """FindCoordinator's answer for one group, from this process's view."""
        return discovery.locate(group_id, self.shards, self.view)

    def describe_cluster(self) -> pb.DescribeClusterResponse:
        """DescribeCluster's answer: sharded, active-standby or standalone."""
        if self.sharded:
            mode = "sharded"
        else:
            mode = "standalone" if isinstance(self.runtimes[0].office, Standalone) else "active-standby"
        return discovery.describe_cluster(self.runtimes, self.view, self.advertised, mode)


def as_router(runtime: CoordinatorRuntime | ShardRouter) -> ShardRouter:
    """A router as it is, a lone runtime as a router of one shard (what servers and tools take)."""
    return runtime if isinstance(runtime, ShardRouter) else ShardRouter([runtime])


class _AnyInOffice:
    """The HA role gauge of a sharded process: active while it leads any shard; term 0."""

    def __init__(self, runtimes: list[CoordinatorRuntime]) -> None:
        self._runtimes = runtimes

    def in_office(self) -> bool:
        return any(r.office.in_office() for r in self._runtimes)

    def term(self) -> int:
        return 0
