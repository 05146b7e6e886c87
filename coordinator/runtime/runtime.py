"""The runtime: carries out what the group model decides, and nothing else decides.

It owns the edges the model must not touch: the store, the keyed timers, the answers to
waiting requests, the sample log and the office (HA). One thread (the server's event loop)
calls it; store writes run on a ``Writer`` (a thread pool in the server, inline in tests)
whose completions come back to that thread. Its jobs, one a module:

- admission and terms (``coordinator.runtime.terms``): may this process answer now, loading and
  unloading the groups as the office's verdict changes;
- the per-group write queue (``coordinator.runtime.write_queue``): a reply waits for every write of
  its group queued before it;
- answers and their completion off the loop (``coordinator.runtime.replies``);
- timers (``coordinator.runtime.timers``);
- this module: a request's step and the effects it returns, carried out in order.

A failed write puts the group back as last stored (``CoordinatorModel.roll_back``) and the
replies waiting on it get COORDINATOR_NOT_AVAILABLE; a fenced write (another coordinator
took over) unloads every group and tells the office. Discovery (FindCoordinator, DescribeCluster)
is the process's, not a shard's: ``coordinator.runtime.discovery``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from google.protobuf.message import Message

from groupcoord.coordinator.clock import Clock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.effects import (
    ArmTimer,
    CancelTimer,
    Count,
    Effect,
    Forget,
    Offload,
    Persist,
    RecordLoad,
    Reply,
    TimerKey,
    Token,
    error,
    error_response,
)
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.coordinator.runtime.heap import BULK_EFFECTS, in_bulk, pace_collector
from groupcoord.coordinator.runtime.office import HandOver, Office
from groupcoord.coordinator.runtime.replies import Answer, Replies
from groupcoord.coordinator.runtime.shared import ProcessParts, WithProcessParts
from groupcoord.coordinator.runtime.terms import Terms
from groupcoord.coordinator.runtime.timers import TimerQueue
from groupcoord.coordinator.runtime.watchers import GroupWatcher
from groupcoord.coordinator.runtime.write_queue import WriteQueue, Writes
from groupcoord.coordinator.runtime.writers import InlineWriter, ThreadWriter, Writer
from groupcoord.coordinator.storage.store import FencedError, GroupRecord, GroupStore, MemoryStore
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Answer", "CoordinatorRuntime", "SampleSink"]

log = logging.getLogger("groupcoord.runtime")


class SampleSink(Protocol):
    """Where accepted load reports go (``loadstats.sample_log.SampleLog`` via ``coordinator.process.load_reports``)."""

    def __call__(self, group_id: str, member_id: str, report: pb.LoadReport) -> None: ...


class CoordinatorRuntime(WithProcessParts):
    """A ``CoordinatorModel`` with its store, timers, waiting requests and office."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        store: GroupStore | None = None,
        clock: Clock | None = None,
        office: Office | None = None,
        on_load_report: SampleSink | None = None,
        on_change: Callable[[Group], None] | None = None,
        writer: Writer | None = None,
        parts: ProcessParts | None = None,
        label: str = "",
        account_of: Callable[[str, str], str] | None = None,
    ) -> None:
        """``parts`` are shared by the runtimes of several shards (``ShardRouter.build``), which then
        pass neither ``config`` nor ``clock``; ``label`` prefixes its log lines ("shard 7: ");
        ``account_of`` is whom a new group's quotas count against (``CoordinatorModel.account_of``)."""
        if parts is not None and (config is not None or clock is not None):
            raise ValueError("give a runtime its config and clock, or the process's parts, not both")
        self.parts = parts = parts or ProcessParts.for_process(config, clock)
        self.model = CoordinatorModel(parts.config, clock=parts.clock, lateness=parts.lag.lost, bulk=in_bulk)
        if account_of is not None:
            self.model.account_of = account_of
        self.timers: TimerQueue[TimerKey] = TimerQueue(parts.clock)
        self.on_load_report = on_load_report
        self._on_change = on_change
        self._replies = Replies(parts.checkers)
        self._writes = WriteQueue(store or MemoryStore(), writer or InlineWriter(), parts.metrics)
        self._terms = Terms(office, self, self._writes.store.load_all, on_election=parts.metrics.elections.inc,
                            label=label)
        parts.metrics.bind(lambda: self.model.groups, self._terms.office, now=parts.clock.now,
                           wall_ms=parts.clock.wall_ms)
        self.watchers: list[GroupWatcher] = []  # told of changes and unloads (the Session streams' news)

    # ------------------------------------------------------------------ its parts (config, clock, ...: ``WithProcessParts``)

    @property
    def store(self) -> GroupStore:
        return self._writes.store

    @property
    def office(self) -> Office:
        return self._terms.office

    @property
    def groups(self) -> dict[str, Group]:
        return self.model.groups

    def member_count(self) -> int:
        """Members of every group of this shard, classic and consumer protocol."""
        return self.model.member_count()

    @property
    def writer(self) -> Writer:
        return self._writes.writer

    @writer.setter
    def writer(self, writer: Writer) -> None:
        """Tests hold writes back (a slow store) by setting their own."""
        self._writes.writer = writer

    @property
    def loading(self) -> bool:
        """Loading this term's groups: requests get COORDINATOR_LOAD_IN_PROGRESS meanwhile."""
        return self._terms.loading

    @loading.setter
    def loading(self, loading: bool) -> None:
        self._terms.loading = loading

    @property
    def in_flight(self) -> int:
        """Store jobs started and not yet finished, unloaded groups' included (a hand-over waits for 0)."""
        return self._writes.in_flight

    @property
    def last_load_s(self) -> float | None:
        """How long the last load of a term took (metrics)."""
        return self._terms.last_load_s

    # ------------------------------------------------------------------ requests

    def submit(self, step: Callable[[Token], list[Effect]], response_type: type[Message], answer: Answer) -> None:
        """Run one model step for a request; ``answer`` is called exactly once, maybe later."""
        answer = self.metrics.timed(response_type, answer)
        refusal = self.refusal()
        if refusal is not None:
            answer(error_response(response_type, refusal))
            return
        self.carry_out(step(self._replies.take(answer)))

    def quick_heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse | None:
        """The answer to a current member's heartbeat in a Stable group, given at once with no token,
        step or reply to route (``CoordinatorModel.quick_heartbeat``), its latency observed as
        ``submit``'s are. None: ``submit`` the full step, which answers every other case: out of
        office, loading, not such a heartbeat, or a write of the group in flight (a reply waits for it)."""
        if self._writes.busy(request.group_id) or self.refusal() is not None:
            return None
        timer = self.metrics.timer
        started = timer()
        quick = self.model.quick_heartbeat(request)
        if quick is None:
            return None
        renewal, answer = quick
        self.timers.schedule(renewal.key, renewal.delay_s, self._fire)
        self.metrics.observe(pb.HeartbeatResponse, pb.NONE, timer() - started)
        return answer

    def catalog_snapshot(self, group_id: str) -> CatalogSnapshot | None:
        """The group's catalog as of now (None: no such group), to compare a large PutTasks with off the loop."""
        group = self.model.groups.get(group_id)
        return group.catalog_snapshot() if group is not None else None

    def refusal(self) -> pb.Error | None:
        """Why this process cannot answer for groups now (None: it can). Asks the office first."""
        return self._terms.refusal()

    def waiting(self) -> int:
        """How many requests wait for their answer (held in a phase, or behind a write)."""
        return self._replies.waiting()

    def records(self) -> dict[str, Any]:
        """Each group's last durable record (for tests and tools)."""
        return self._writes.records()

    # ------------------------------------------------------------------ timers

    def poll_timers(self) -> int:
        """Fire every due timer, if this process is in office; returns how many fired."""
        if self.refusal() is not None:
            return 0
        return self.timers.poll()

    def _fire(self, key: TimerKey) -> None:
        expiring = key.kind == "session" and self._has_member(key)
        self.carry_out(self.model.fire(key))
        if expiring and not self._has_member(key):
            self.metrics.session_expirations.inc()

    def _has_member(self, key: TimerKey) -> bool:
        group = self.model.groups.get(key.group_id)
        return group is not None and key.member_id in group.members

    # ------------------------------------------------------------------ effects

    def carry_out(self, effects: list[Effect]) -> None:
        """Carry out one step's effects. Writes start last, once the step's replies are queued
        behind them, so even a writer that finishes at once (tests) answers nobody early. A phase's
        completion in a large group is carried out as a burst (``coordinator.runtime.heap``)."""
        if len(effects) >= BULK_EFFECTS:
            with in_bulk():
                self._carry_out(effects)
        else:
            self._carry_out(effects)

    def _carry_out(self, effects: list[Effect]) -> None:
        starting: list[Writes] = []
        for effect in effects:
            if isinstance(effect, ArmTimer):  # the commonest: every heartbeat arms its session
                self.timers.schedule(effect.key, effect.delay_s, self._fire)
            elif isinstance(effect, Reply):
                if not self._writes.hold(effect):
                    self._replies.deliver(effect)
            elif isinstance(effect, CancelTimer):
                self.timers.cancel(effect.key)
            elif isinstance(effect, (Persist, Forget)):
                writes = self._write(effect)
                if writes is not None:
                    starting.append(writes)
            elif isinstance(effect, RecordLoad):
                if self.on_load_report is not None:
                    self.on_load_report(effect.group_id, effect.member_id, effect.report)
            elif isinstance(effect, Count):
                self.metrics.count(effect.what, effect.amount)
            elif isinstance(effect, Offload):
                self._replies.offload(effect, self.carry_out, self._still_in(self._terms.current))
        for writes in starting:
            assert writes.busy is not None
            self._writes.start(writes, writes.busy, self)

    def _still_in(self, term: int | None) -> Callable[[], bool]:
        """Whether this runtime still serves ``term`` (an offloaded job's result is dropped once not)."""
        return lambda: term is not None and self._terms.current == term

    def _write(self, write: Persist | Forget) -> Writes | None:
        """Queue ``write``; returns its group's queue if the write must be started."""
        if isinstance(write, Persist):
            group = self.model.groups.get(write.group_id)
            if group is not None:
                self.metrics.watch.changed(group)  # rebalances are told apart by what gets written
                if self._on_change is not None:
                    self._on_change(group)
        else:
            self.metrics.watch.forgotten(write.group_id)
        return self._writes.queue(write)

    # ------------------------------------------------------------------ write outcomes (``WriteOutcomes``)

    def deliver(self, reply: Reply) -> None:
        self._replies.deliver(reply)

    def landed(self, group_id: str) -> None:
        group = self.model.groups.get(group_id)
        if group is not None:  # news only of what the store holds: a failed write is never told
            for watcher in self.watchers:
                watcher.changed(self, group)

    def write_failed(self, group_id: str, failure: BaseException, waiting: list[Reply],
                     stored: GroupRecord | None) -> None:
        if isinstance(failure, FencedError):
            log.warning("group %s: write fenced, another coordinator rules now: %s", group_id, failure,
                        extra={"event": "write_fenced", "group": group_id, "reason": str(failure)})
            self._replies.refuse(waiting, error(pb.NOT_COORDINATOR, "this coordinator is no longer active",
                                                self.office.active_address()))
            self.unload()
            self.office.stand_down()
            return
        log.error("group %s: store write failed: %s", group_id, failure,
                  extra={"event": "write_failed", "group": group_id, "reason": str(failure)})
        self._replies.refuse(waiting, error(pb.COORDINATOR_NOT_AVAILABLE, f"the coordinator's store failed: {failure}"))
        self.carry_out(self.model.roll_back(group_id, stored))

    # ------------------------------------------------------------------ terms (``TermHost``)

    def load(self, term: int | None = None) -> int:
        """Resume every stored group now (standalone start-up); returns how many."""
        return self._terms.load(term)

    def begin_term(self, term: int, records: Mapping[str, GroupRecord]) -> None:
        """Serve ``records`` as this term's groups (after loading them, maybe off the loop)."""
        self._terms.begin_term(term, records)

    def load_failed(self, failure: BaseException) -> None:
        self._terms.load_failed(failure)

    def unload(self) -> None:
        """Stop answering for every group: parked and waiting requests get NOT_COORDINATOR."""
        self._terms.unload()

    def serve(self, records: Mapping[str, GroupRecord]) -> int:
        self._writes.begin(dict(records))
        self.carry_out(self.model.load(records))
        return len(self.model.groups)

    def group_count(self) -> int:
        return len(self.model.groups)

    def drop_groups(self, hint: str) -> None:
        message = "this coordinator is no longer active"
        for watcher in self.watchers:
            watcher.unloaded(self)
        effects = self.model.unload(pb.NOT_COORDINATOR, message)
        self.timers.clear()
        failed = error(pb.NOT_COORDINATOR, message, hint)
        self._replies.refuse(self._writes.drop(), failed)
        self._replies.refuse([effect for effect in effects if isinstance(effect, Reply)], failed)

    # ------------------------------------------------------------------ life

    def attach(self, loop: asyncio.AbstractEventLoop, writer: Writer | None = None) -> None:
        """Run on ``loop`` (the server's): writes (on ``writer``, shared by a process's shards, else a
        pool of its own) and loads go to threads and come back to it, and the office's changes are
        looked at there at once. An office that hands its shard over (``HandOver``) is told once this
        runtime is out of office with no write in flight."""
        if isinstance(self._writes.writer, InlineWriter):
            self._writes.writer = writer or ThreadWriter(loop.call_soon_threadsafe)
        pace_collector()  # a server may hold large groups (``coordinator.runtime.heap``)
        self._replies.attach(loop)
        self.lag.start(loop)
        self.metrics.attach(loop)
        self._terms.attach(loop, self.clock)
        office = self.office
        if isinstance(office, HandOver):
            def drained() -> None:
                if not office.in_office() and self.in_flight == 0:
                    self.refusal()  # unloads, if the watch has not done it yet
                    office.drained()

            self._writes.on_idle = drained
            office.watch(lambda: loop.call_soon_threadsafe(drained))

    def release_parked(self) -> None:
        """Stopping: parked calls get COORDINATOR_NOT_AVAILABLE now (their members rediscover and
        retry) instead of hanging until the server's grace period cuts them off."""
        for effect in self.model.release_parked(pb.COORDINATOR_NOT_AVAILABLE, "the coordinator is shutting down"):
            if isinstance(effect, Reply):
                self._replies.answer(effect.to, effect.response)
