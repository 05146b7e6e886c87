"""Every open Session stream of one coordinator process: which stream carries which member, the
per-principal quota, idle streams, and the news pushed to members (``coordinator.rpc.session_news``).

A member belongs to the stream that last sent a request for it (a worker that reconnects re-sends
its members' state on its new stream, which takes them over). The registry is a ``GroupWatcher`` of
every runtime (``coordinator.runtime.watchers``): a change of a group's record may be news to the
group's members on streams; a runtime that unloads its groups (its shard moved, its term ended)
sends ``CoordinatorMoved`` to each of their members and lets the members go, the stream staying open
for its others. All on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any, Protocol

import grpc
from prometheus_client import CollectorRegistry

from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.states import GroupState
from groupcoord.coordinator.rpc.session_envelope import rebalance_started_frames
from groupcoord.coordinator.rpc.session_metrics import SessionMetrics
from groupcoord.coordinator.rpc.session_news import classic_news, consumer_news, moved_news, released_news
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["MemberKey", "SessionRegistry", "StreamHandle"]

log = logging.getLogger("groupcoord.session")
MemberKey = tuple[str, str]  # (group id, member id)


class StreamHandle(Protocol):
    """What the registry needs of a stream (``coordinator.rpc.session_stream.SessionStream``)."""

    principal: str
    in_flight: int
    last_active: float

    def push(self, news: pb.SessionNews) -> None: ...

    def push_frame(self, data: bytes) -> None:
        """Push news already encoded as a ``SessionResponse`` (``session_envelope.rebalance_started_frames``)."""

    def forget_member(self, key: MemberKey) -> None: ...

    def finish(self, code: grpc.StatusCode, message: str, *, flush: bool = False, reason: str = "protocol") -> None:
        ...


class SessionRegistry:
    """The process's streams; installed as a watcher on every runtime of ``router``."""

    def __init__(self, router: ShardRouter) -> None:
        self.router = router
        self.config = router.config
        self.clock = router.clock
        self.streams: set[StreamHandle] = set()
        self._per_principal: dict[str, int] = {}
        self._carrier: dict[MemberKey, StreamHandle] = {}
        self._by_group: dict[str, set[str]] = {}  # group id -> member ids some stream carries
        self._rebalance_told: set[str] = set()  # groups whose current rebalance was told
        self._target_told: dict[str, int] = {}  # group id -> consumer target epoch told
        self._caught_up: dict[MemberKey, int] = {}  # member -> target epoch it was told on arriving
        self._release_told: dict[str, set[str]] = {}  # group id -> members told their awaited tasks were let go
        self.stopping = False
        try:
            self.metrics = SessionMetrics(router.metrics.registry)
        except ValueError:  # a second server over the same runtimes (tests): its figures stay unexported
            self.metrics = SessionMetrics(CollectorRegistry())
        self.figures = self.metrics.figures
        for runtime in router.runtimes:
            runtime.watchers.append(self)

    # ------------------------------------------------------------------ streams

    def open(self, stream: StreamHandle) -> str | None:
        """Admit ``stream``; the reason it may not open (its principal's quota) or None."""
        if self.stopping:
            return "the coordinator is stopping: ask FindCoordinator again"
        principal = stream.principal
        if principal:
            limit = self.config.session_max_streams_per_principal
            held = self._per_principal.get(principal, 0)
            if held >= limit:
                return (f"{principal} holds {held} Session streams on this coordinator, at most {limit} "
                        f"(session_max_streams_per_principal)")
            self._per_principal[principal] = held + 1
        self.streams.add(stream)
        self.figures.streams = len(self.streams)
        return None

    def close(self, stream: StreamHandle, members: Iterator[MemberKey]) -> None:
        if stream not in self.streams:
            return
        self.streams.discard(stream)
        self.figures.streams = len(self.streams)
        principal = stream.principal
        if principal:
            left = self._per_principal.get(principal, 1) - 1
            if left > 0:
                self._per_principal[principal] = left
            else:
                self._per_principal.pop(principal, None)
        for key in list(members):
            if self._carrier.get(key) is stream:
                self._drop(key)

    def carry(self, key: MemberKey, stream: StreamHandle) -> None:
        """``stream`` carries the member now (it sent a request for it, or was given its id)."""
        previous = self._carrier.get(key)
        if previous is stream:
            return
        if previous is not None:
            previous.forget_member(key)
        self._carrier[key] = stream
        self._by_group.setdefault(key[0], set()).add(key[1])
        self.figures.members = len(self._carrier)
        if previous is None:
            self._catch_up(key, stream)

    def _catch_up(self, key: MemberKey, stream: StreamHandle) -> None:
        """A member new to the streams missed the news of a target that landed between its request's step
        and its answer (the group had no member on a stream to tell): what it must act on, now."""
        runtime = self.router.for_group(key[0])
        consumer = runtime.model.consumer.groups.get(key[0]) if runtime is not None else None
        if consumer is not None:
            for news in consumer_news(consumer, [key[1]]):
                stream.push(news)
                self._caught_up[key] = consumer.target_epoch  # its landing tells the others, not it again

    def drop(self, key: MemberKey, stream: StreamHandle) -> None:
        if self._carrier.get(key) is stream:
            self._drop(key)

    def _drop(self, key: MemberKey) -> None:
        del self._carrier[key]
        self._caught_up.pop(key, None)
        self.figures.members = len(self._carrier)
        members = self._by_group.get(key[0])
        if members is not None:
            members.discard(key[1])
            if not members:
                del self._by_group[key[0]]
                self._rebalance_told.discard(key[0])
                self._target_told.pop(key[0], None)
                self._release_told.pop(key[0], None)

    def members(self) -> int:
        return len(self._carrier)

    # ------------------------------------------------------------------ news (GroupWatcher)

    def changed(self, runtime: Any, group: Group) -> None:
        """A group's record landed in the store: news for its members on streams, once per rebalance or target."""
        group_id = group.group_id
        members = self._by_group.get(group_id)
        if not members:
            return
        try:
            told: list[pb.SessionNews] = []
            if group.state is not GroupState.PREPARING_REBALANCE:
                self._rebalance_told.discard(group_id)
            elif group_id not in self._rebalance_told:
                self._rebalance_told.add(group_id)
                self._rebalance_started(group, members)
            consumer = runtime.model.consumer.groups.get(group_id)
            if consumer is not None and self._target_told.get(group_id) != consumer.target_epoch:
                self._target_told[group_id] = consumer.target_epoch
                told.extend(news for news in consumer_news(consumer, members)
                            if self._caught_up.pop((group_id, news.member_id), None) != consumer.target_epoch)
            if consumer is not None:
                told.extend(self._released(consumer, members))
            for news in told:
                carrier = self._carrier.get((group_id, news.member_id))
                if carrier is not None:
                    carrier.push(news)
        except Exception:  # a listener never breaks the runtime's step
            log.exception("session news for group %s failed", group_id)

    def _rebalance_started(self, group: Group, members: set[str]) -> None:
        """``RebalanceStarted`` to each member on a stream not already joining, encoded once for them all."""
        group_id, carriers = group.group_id, self._carrier
        told = classic_news(group, members)
        for member_id, data in zip(told, rebalance_started_frames(group_id, group.generation, told), strict=True):
            carrier = carriers.get((group_id, member_id))
            if carrier is not None:
                carrier.push_frame(data)

    def _released(self, consumer: Any, members: set[str]) -> list[pb.SessionNews]:
        """Members waiting for tasks others just let go, each told once until its own step (O(waiting))."""
        group_id = consumer.group_id
        if not consumer.unblocked:
            self._release_told.pop(group_id, None)
            return []
        told = self._release_told.setdefault(group_id, set())
        told &= consumer.unblocked  # a member that stepped since is told again next time
        news = released_news(consumer, members, told)
        told.update(n.member_id for n in news)
        return news

    def unloaded(self, runtime: Any) -> None:
        """The runtime's groups left this process: their members on streams hear CoordinatorMoved and
        are let go (their streams stay open for the others)."""
        hint = runtime.office.active_address()
        router = self.router
        moved = [key for key in self._carrier if router.for_group(key[0]) is runtime]
        for key in moved:
            stream = self._carrier[key]
            stream.push(moved_news(key[0], key[1], hint))
            stream.forget_member(key)
            self._drop(key)

    # ------------------------------------------------------------------ life

    def sweep_idle(self) -> int:
        """Close every stream idle past ``session_idle_timeout_ms`` on the clock; returns how many."""
        limit_s = self.config.session_idle_timeout_ms / 1000
        now = self.clock.now()
        idle = [s for s in self.streams if s.in_flight == 0 and now - s.last_active >= limit_s]
        for stream in idle:
            self.close(stream, iter(()))
            stream.finish(grpc.StatusCode.UNAVAILABLE, f"the stream was idle for {limit_s:g} s "
                          f"(session_idle_timeout_ms); open a new one when needed", reason="idle")
        return len(idle)

    async def sweep_forever(self) -> None:
        """``sweep_idle`` a few times per idle timeout (the clock decides who is idle)."""
        period_s = min(self.config.session_idle_timeout_ms / 4000, 5.0)
        while True:
            await asyncio.sleep(period_s)
            self.sweep_idle()

    def stop(self) -> None:
        """The process stops coordinating: every member hears CoordinatorMoved, then its stream ends."""
        self.stopping = True
        for key, stream in list(self._carrier.items()):
            stream.push(moved_news(key[0], key[1], ""))
        for stream in list(self.streams):
            stream.finish(grpc.StatusCode.UNAVAILABLE, "the coordinator is stopping: ask FindCoordinator again",
                          flush=True, reason="stopping")
        for runtime in self.router.runtimes:
            if self in runtime.watchers:
                runtime.watchers.remove(self)
