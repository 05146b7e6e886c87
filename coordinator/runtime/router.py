"""The runtimes of one process, one per shard, and which one answers a group.

Kafka's ``CoordinatorRuntime`` keeps one context per ``__consumer_offsets`` partition, each with
its own state (loading, active, closed) and epoch; we keep one ``CoordinatorRuntime`` per shard,
each with its own office (the shard's election), store (the shard's znodes, fenced by its epoch),
model, timers and write queues. So a shard loads, unloads, or has its writes fenced without
touching any other: one shard's trouble never reaches another's groups. The runtimes share the
process's event loop, clock, store writer threads, checker threads, lag monitor and metrics.

An unsharded coordinator (standalone, or active/standby) is a router of one runtime. A sharded one
has a ``ClusterView`` (``coordinator.ha.shard_election``) to answer FindCoordinator and
DescribeCluster for shards it does not lead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from groupcoord.coordinator.clock import Clock, SystemClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import error
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.runtime.checkers import CheckerPool
from groupcoord.coordinator.runtime.lag import lag_monitor_for
from groupcoord.coordinator.runtime.metrics import CoordinatorMetrics, ShardCollector, ShardFigures
from groupcoord.coordinator.runtime.office import HandOver, Office
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime, SampleSink
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.coordinator.runtime.writers import InlineWriter, ThreadWriter, Writer
from groupcoord.coordinator.storage.store import GroupStore
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ClusterView", "ShardRouter"]


class ClusterView(Protocol):
    """The sharded cluster as this process sees it in ZooKeeper; cheap, thread-safe reads."""

    def leader(self, shard: int) -> tuple[str, int] | None:
        """The shard's leader (advertised address, epoch), None when it has none."""
        ...

    def coordinators(self) -> list[str]:
        """Every live coordinator's advertised address, sorted."""
        ...

    def moves(self) -> dict[int, str]:
        """Shards this process is handing over now -> the coordinator meant to take each ("" unknown)."""
        ...


class ShardRouter:
    """Routes each group to its shard's runtime; answers the questions about the whole process."""

    def __init__(self, runtimes: Sequence[CoordinatorRuntime], *, view: ClusterView | None = None) -> None:
        if not runtimes:
            raise ValueError("a router needs at least one runtime")
        self.runtimes = list(runtimes)
        self.shards = len(self.runtimes)
        self.view = view
        first = self.runtimes[0]
        self.config = first.config
        self.clock = first.clock
        self.checkers = first.checkers
        self.large_requests = first.large_requests
        self.lag = first.lag
        self.metrics = first.metrics
        self._advertised = ""
        if self.shards > 1:
            self.metrics.bind(self._all_groups, _AnyInOffice(self.runtimes), now=self.clock.now,
                              wall_ms=self.clock.wall_ms)
            self.metrics.registry.register(ShardCollector(self.metrics, self._shard_figures))

    @classmethod
    def build(cls, offices: Sequence[Office], stores: Sequence[GroupStore], *, view: ClusterView,
              config: CoordinatorConfig | None = None, clock: Clock | None = None,
              on_load_report: SampleSink | None = None) -> ShardRouter:
        """One runtime per (office, store) pair, sharing one clock, lag monitor, checker pool and metrics."""
        clock = clock or SystemClock()
        lag, checkers, metrics = lag_monitor_for(clock), CheckerPool(), CoordinatorMetrics()
        runtimes = [CoordinatorRuntime(config, store=store, clock=clock, office=office, on_load_report=on_load_report,
                                       metrics=metrics, lag=lag, checkers=checkers)
                    for office, store in zip(offices, stores, strict=True)]
        large = runtimes[0].large_requests
        for shard, runtime in enumerate(runtimes):
            runtime.large_requests = large  # one byte budget for the process's large requests
            runtime.label = f"shard {shard}: "
        return cls(runtimes, view=view)

    @property
    def advertised(self) -> str:
        return self._advertised

    @advertised.setter
    def advertised(self, address: str) -> None:
        self._advertised = address
        for runtime in self.runtimes:
            runtime.advertised = address

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
                                        sum(len(g.members) for g in groups.values()), runtime.last_load_s))
        return figures

    def _all_groups(self) -> dict[str, Group]:
        return {g: group for runtime in self.runtimes for g, group in runtime.model.groups.items()}

    # ------------------------------------------------------------------ life

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every runtime on ``loop``, sharing one pool of store writer threads; a shard handed over is
        reported drained once its runtime is out of office with no write in flight."""
        writer: Writer | None = None
        for shard, runtime in enumerate(self.runtimes):
            if isinstance(runtime.writer, InlineWriter):
                writer = writer or ThreadWriter(loop.call_soon_threadsafe)
                runtime.writer = writer
            runtime.attach(loop)
            office = runtime.office
            if isinstance(office, HandOver):
                check = self._drain_check(shard)
                runtime.on_idle = check
                office.watch(lambda check=check: loop.call_soon_threadsafe(check))  # type: ignore[misc]

    def _drain_check(self, shard: int) -> Callable[[], None]:
        runtime = self.runtimes[shard]

        def check() -> None:
            office = runtime.office
            if isinstance(office, HandOver) and not office.in_office() and runtime.in_flight == 0:
                runtime.refusal()  # unloads, if the watch has not done it yet
                office.drained()

        return check

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
        if self.view is None:
            return self.runtimes[0].locate(group_id)
        if not group_id:
            return pb.CoordinatorLocation(group_id=group_id, error=error(pb.INVALID_GROUP_ID, "empty group id"))
        shard = self.shard_of(group_id)
        leader = self.view.leader(shard)
        if leader is None:
            return pb.CoordinatorLocation(group_id=group_id, shard=shard, error=error(
                pb.COORDINATOR_NOT_AVAILABLE, f"shard {shard} has no leader right now, retry shortly"))
        return pb.CoordinatorLocation(group_id=group_id, address=leader[0], shard=shard, epoch=leader[1])

    def describe_cluster(self) -> pb.DescribeClusterResponse:
        if self.view is None:
            return self.runtimes[0].describe_cluster()
        view = self.view
        infos = []
        led: dict[str, int] = {}
        moves = view.moves()
        for shard, runtime in enumerate(self.runtimes):
            leader = view.leader(shard)
            address, epoch = leader if leader is not None else ("", 0)
            if address:
                led[address] = led.get(address, 0) + 1
            ours = address == self._advertised
            state = pb.SHARD_LEADERLESS if not address else pb.SHARD_ACTIVE
            if shard in moves:
                state = pb.SHARD_UNLOADING
            elif ours and runtime.loading:
                state = pb.SHARD_LOADING
            groups = runtime.model.groups
            infos.append(pb.ShardInfo(shard=shard, leader=address, epoch=epoch, state=state,
                                      groups=len(groups) if ours else -1,
                                      members=sum(len(g.members) for g in groups.values()) if ours else -1))
        coordinators = [pb.ClusterCoordinator(address=a, shards_led=led.get(a, 0), self=a == self._advertised)
                        for a in view.coordinators()]
        return pb.DescribeClusterResponse(
            shards=self.shards, mode="sharded", coordinators=coordinators, shard_infos=infos,
            moves=[pb.ShardMove(shard=s, from_address=self._advertised, to_address=to) for s, to in sorted(moves.items())])


class _AnyInOffice:
    """The HA role gauge of a sharded process: active while it leads any shard; term 0."""

    def __init__(self, runtimes: list[CoordinatorRuntime]) -> None:
        self._runtimes = runtimes

    def in_office(self) -> bool:
        return any(r.office.in_office() for r in self._runtimes)

    def term(self) -> int:
        return 0
