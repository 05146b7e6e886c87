"""The runtime: carries out what the group model decides, and nothing else decides.

It owns the edges the model must not touch: the store, the keyed timers, the answers to
waiting requests, the sample log and the office (HA). One thread (the server's event loop)
calls it; store writes run on a ``Writer`` (a thread pool in the server, inline in tests)
whose completions come back to that thread.

Writes, per group, in order: a group has at most one write in flight and one queued (a newer
record replaces the queued one: each record is the whole group). A reply waits for every
write of its group queued before it, so a member never hears of a change the store could
still lose, while a slow write (a ZooKeeper round trip) delays only its own group.

A failed write puts the group back as last stored (``CoordinatorModel.roll_back``) and the
replies waiting on it get COORDINATOR_NOT_AVAILABLE; a fenced write (another coordinator
took over) unloads every group and tells the office.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from google.protobuf.message import Message

from groupcoord.coordinator.clock import Clock, SystemClock
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
from groupcoord.coordinator.model.records import finish_record
from groupcoord.coordinator.runtime.byte_budget import ByteBudget
from groupcoord.coordinator.runtime.checkers import CheckerPool
from groupcoord.coordinator.runtime.heap import BULK_EFFECTS, bulk_job, in_bulk, pace_collector
from groupcoord.coordinator.runtime.lag import LagMonitor, lag_monitor_for
from groupcoord.coordinator.runtime.metrics import CoordinatorMetrics
from groupcoord.coordinator.runtime.office import Office, Standalone
from groupcoord.coordinator.runtime.timers import TimerQueue
from groupcoord.coordinator.runtime.watchers import GroupWatcher
from groupcoord.coordinator.runtime.writers import InlineWriter, ThreadWriter, Writer
from groupcoord.coordinator.storage.store import FencedError, GroupRecord, GroupStore, MemoryStore
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CoordinatorRuntime", "SampleSink"]

log = logging.getLogger("groupcoord.runtime")
Answer = Callable[[Message], None]


class SampleSink(Protocol):
    """Where accepted load reports go (``loadstats.sample_log.SampleLog`` via ``coordinator.process.load_reports``)."""

    def __call__(self, group_id: str, member_id: str, report: pb.LoadReport) -> None: ...


@dataclass
class _Writes:
    """One group's write queue."""

    busy: Persist | Forget | None = None
    queued: Persist | Forget | None = None
    after_busy: list[Reply] = field(default_factory=list)
    after_queued: list[Reply] = field(default_factory=list)


class CoordinatorRuntime:
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
        metrics: CoordinatorMetrics | None = None,
        lag: LagMonitor | None = None,
        checkers: CheckerPool | None = None,
    ) -> None:
        """``lag`` and ``checkers`` may be shared by the runtimes of several shards (``ShardRouter``)."""
        clock = clock or SystemClock()
        self.lag = lag or lag_monitor_for(clock)
        self.model = CoordinatorModel(config, clock=clock, lateness=self.lag.lost, bulk=in_bulk)
        self.config = self.model.config
        self.clock = self.model.clock
        self.timers: TimerQueue[TimerKey] = TimerQueue(self.clock)
        self.store: GroupStore = store or MemoryStore()
        self.office: Office = office or Standalone()
        self.on_load_report = on_load_report
        self._on_change = on_change
        self.writer: Writer = writer or InlineWriter()
        self.metrics = metrics or CoordinatorMetrics()  # its own registry: ``metrics.registry``
        self.metrics.bind(lambda: self.model.groups, self.office, now=self.clock.now, wall_ms=self.clock.wall_ms)
        self._tokens = itertools.count(1)
        self._answers: dict[Token, Answer] = {}
        self._writes: dict[str, _Writes] = {}
        self._stored: dict[str, GroupRecord] = {}  # each group's record as last written or loaded
        # the office term whose groups are loaded; None = none (standby, or between terms)
        self._term: int | None = 0 if office is None else None
        self.loading = False
        self._start_load: Callable[[int], object] = self.load
        self._loading_term: int | None = None
        # request checks and answer completions too heavy for the event loop (``coordinator.model.prechecks``)
        self.checkers = checkers or CheckerPool()
        self.large_requests = ByteBudget(self.config.max_request_bytes_in_flight)
        self._loop: asyncio.AbstractEventLoop | None = None  # set by ``attach``: completions run off it
        #: this process's address for clients (host:port), answered by FindCoordinator; set by the server
        self.advertised = ""
        #: store jobs started and not yet finished, unloaded groups' included (a hand-over waits for 0)
        self.in_flight = 0
        self.on_idle: Callable[[], object] | None = None  # called when ``in_flight`` drops to 0
        self.last_load_s: float | None = None  # how long the last load of a term took (metrics)
        self.label = ""  # prefix of its log lines ("shard 7: "), when the process has several runtimes
        self.watchers: list[GroupWatcher] = []  # told of changes and unloads (the Session streams' news)

    @property
    def groups(self) -> dict[str, Group]:
        return self.model.groups

    # ------------------------------------------------------------------ requests

    def submit(self, step: Callable[[Token], list[Effect]], response_type: type[Message], answer: Answer) -> None:
        """Run one model step for a request; ``answer`` is called exactly once, maybe later."""
        answer = self.metrics.timed(response_type, answer)
        refusal = self.refusal()
        if refusal is not None:
            answer(error_response(response_type, refusal))
            return
        token = next(self._tokens)
        self._answers[token] = answer
        self.carry_out(step(token))

    def quick_heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse | None:
        """The answer to a current member's heartbeat in a Stable group, given at once with no token,
        step or reply to route (``CoordinatorModel.quick_heartbeat``), its latency observed as
        ``submit``'s are. None: ``submit`` the full step, which answers every other case: out of
        office, loading, not such a heartbeat, or a write of the group in flight (a reply waits for it)."""
        if request.group_id in self._writes or self.refusal() is not None:
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
        if not self.office.in_office():
            if self._term is not None or self.loading:
                log.warning("%sthe office says our term is over: this process stops acting as the coordinator",
                            self.label)
                self.unload()
            return error(pb.NOT_COORDINATOR, "this coordinator is not active for this group (a standby, or another "
                         "coordinator leads its shard)", self.office.active_address())
        term = self.office.term()
        if self._term != term and not self.loading:
            if self._term is not None:
                self.unload()
            self.loading = True
            self._start_load(term)
        if self.loading:
            return error(pb.COORDINATOR_LOAD_IN_PROGRESS, "loading groups, retry shortly")
        return None

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
        starting: list[_Writes] = []
        for effect in effects:
            if isinstance(effect, ArmTimer):  # the commonest: every heartbeat arms its session
                self.timers.schedule(effect.key, effect.delay_s, self._fire)
            elif isinstance(effect, Reply):
                self._reply(effect)
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
                self._offload(effect)
        for writes in starting:
            assert writes.busy is not None
            self._start(writes, writes.busy)

    def _reply(self, reply: Reply) -> None:
        writes = self._writes.get(reply.group_id) if reply.group_id else None
        if writes is None:
            self._deliver(reply)
        elif writes.queued is not None:
            writes.after_queued.append(reply)
        else:
            writes.after_busy.append(reply)

    def _deliver(self, reply: Reply) -> None:
        """Answer ``reply``, once its ``complete`` has run: inline when no loop is attached (tests,
        tools), else on a checker thread and back on the loop."""
        complete = reply.complete
        if complete is None:
            self._answer(reply.to, reply.response)
            return
        loop = self._loop
        if loop is None:
            complete()
            self._answer(reply.to, reply.response)
            return

        def completed(future: asyncio.Future[None]) -> None:
            failure = future.exception() if not future.cancelled() else None
            if future.cancelled() or failure is not None:
                log.error("completing an answer failed: %s", failure or "cancelled")
                self._answer(reply.to, error_response(type(reply.response), error(
                    pb.COORDINATOR_NOT_AVAILABLE, "the coordinator could not complete its answer")))
                return
            self._answer(reply.to, reply.response)

        self.checkers.start(loop, complete).add_done_callback(completed)

    def _offload(self, effect: Offload) -> None:
        """``effect.job`` off the loop (inline without one: tests, tools), then its ``then`` on the loop,
        unless this runtime's term ended meanwhile (its groups are gone or reloaded)."""
        loop = self._loop
        if loop is None:
            try:
                result: Any = effect.job()
            except Exception as failure:  # noqa: BLE001  # the model records it; nothing else stops
                result = failure
            self.carry_out(effect.then(result))
            return
        term = self._term
        outcome: list[Any] = []

        def job() -> None:
            outcome.append(effect.job())

        def done(future: asyncio.Future[None]) -> None:
            if future.cancelled() or self._term != term or term is None:
                return
            failure = future.exception()
            self.carry_out(effect.then(failure if failure is not None else outcome[0]))

        self.checkers.start(loop, job).add_done_callback(done)

    def _answer(self, token: Token, response: Message) -> None:
        answer = self._answers.pop(token, None)
        if answer is not None:
            answer(response)

    def _write(self, write: Persist | Forget) -> _Writes | None:
        """Queue ``write``; returns its group's queue if the write must be started."""
        if isinstance(write, Persist):
            group = self.model.groups.get(write.group_id)
            if group is not None:
                self.metrics.watch.changed(group)  # rebalances are told apart by what gets written
                if self._on_change is not None:
                    self._on_change(group)
                for watcher in self.watchers:
                    watcher.changed(self, group)
        else:
            self.metrics.watch.forgotten(write.group_id)
        writes = self._writes.get(write.group_id)
        if writes is None:
            writes = self._writes[write.group_id] = _Writes(busy=write)
            return writes
        writes.queued = write  # the newer record supersedes any queued one
        return None

    def _start(self, writes: _Writes, write: Persist | Forget) -> None:
        writes.busy = write
        store = self.store
        finished: dict[str, dict[str, Any]] = {}
        if isinstance(write, Persist):
            def job() -> None:
                record = finish_record(write.record)  # the serialising, here on the writer's thread
                store.save(write.group_id, record)
                finished[write.group_id] = record
        else:
            def job() -> None:
                store.delete(write.group_id)
        timed = self.metrics.timed_write("save" if isinstance(write, Persist) else "delete", bulk_job(job))
        self.in_flight += 1

        def done(failure: BaseException | None) -> None:
            self.in_flight -= 1
            try:
                self._written(writes, write, failure, finished.get(write.group_id))
            finally:
                if self.in_flight == 0 and self.on_idle is not None:
                    self.on_idle()

        self.writer.submit(timed, done)

    def _written(self, writes: _Writes, write: Persist | Forget, failure: BaseException | None,
                 record: dict[str, Any] | None = None) -> None:
        group_id = write.group_id
        if self._writes.get(group_id) is not writes:
            return  # unloaded meanwhile: its replies were already answered
        if failure is None:
            if isinstance(write, Persist):
                self._stored[group_id] = record if record is not None else finish_record(write.record)
            else:
                self._stored.pop(group_id, None)
            done, writes.after_busy = writes.after_busy, writes.after_queued
            writes.after_queued = []
            queued, writes.queued, writes.busy = writes.queued, None, writes.queued
            if queued is None:
                del self._writes[group_id]
            for reply in done:
                self._deliver(reply)
            if queued is not None:
                self._start(writes, queued)
            return
        if isinstance(failure, FencedError):
            log.warning("group %s: write fenced, another coordinator rules now: %s", group_id, failure,
                        extra={"event": "write_fenced", "group": group_id, "reason": str(failure)})
            self.unload()
            self.office.stand_down()
            return
        log.error("group %s: store write failed: %s", group_id, failure,
                  extra={"event": "write_failed", "group": group_id, "reason": str(failure)})
        del self._writes[group_id]
        failed = error(pb.COORDINATOR_NOT_AVAILABLE, f"the coordinator's store failed: {failure}")
        for reply in writes.after_busy + writes.after_queued:
            self._answer(reply.to, error_response(type(reply.response), failed))
        self.carry_out(self.model.roll_back(group_id, self._stored.get(group_id)))

    # ------------------------------------------------------------------ terms

    def load(self, term: int | None = None) -> int:
        """Resume every stored group now (standalone start-up); returns how many."""
        records = self.store.load_all()
        self.begin_term(self.office.term() if term is None else term, records)
        return len(self.model.groups)

    def begin_term(self, term: int, records: Mapping[str, GroupRecord]) -> None:
        """Serve ``records`` as this term's groups (after loading them, maybe off the loop)."""
        self.unload()
        self._stored = dict(records)
        self._term = term
        self.loading = False
        if not isinstance(self.office, Standalone):
            self.metrics.elections.inc()
        self.carry_out(self.model.load(records))

    def load_failed(self, failure: BaseException) -> None:
        log.error("%sloading groups failed (%s): standing down", self.label, failure)
        self.unload()
        self.office.stand_down()

    def unload(self) -> None:
        """Stop answering for every group: parked and waiting requests get NOT_COORDINATOR."""
        hint = self.office.active_address()
        message = "this coordinator is no longer active"
        if self._term is not None:
            log.info("%sout of office (term %d): %d group(s) unloaded", self.label, self._term, len(self.model.groups),
                     extra={"event": "unloaded", "term": self._term, "groups": len(self.model.groups)})
        self._term = None
        self.loading = False
        for watcher in self.watchers:
            watcher.unloaded(self)
        effects = self.model.unload(pb.NOT_COORDINATOR, message)
        self.timers.clear()
        pending = [reply for writes in self._writes.values() for reply in writes.after_busy + writes.after_queued]
        self._writes.clear()
        self._stored.clear()
        failed = error(pb.NOT_COORDINATOR, message, hint)
        for reply in pending:
            self._answer(reply.to, error_response(type(reply.response), failed))
        for effect in effects:
            if isinstance(effect, Reply):
                self._answer(effect.to, error_response(type(effect.response), failed))

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run on ``loop`` (the server's): writes and loads go to threads and come back to it,
        and the office's changes are looked at there at once."""
        if isinstance(self.writer, InlineWriter):
            self.writer = ThreadWriter(loop.call_soon_threadsafe)
        pace_collector()  # a server may hold large groups (``coordinator.runtime.heap``)
        self._loop = loop
        self.lag.start(loop)
        self.metrics.attach(loop)
        self._start_load = lambda term: self._load_off_loop(loop, term)
        self.office.watch(lambda: loop.call_soon_threadsafe(self.refusal))

    def _load_off_loop(self, loop: asyncio.AbstractEventLoop, term: int) -> None:
        self._loading_term = term
        started = self.clock.now()

        def loaded(future: asyncio.Future[dict[str, GroupRecord]]) -> None:
            if not self.loading or self._loading_term != term:
                return  # the office changed its mind meanwhile
            failure = future.exception()
            if failure is not None:
                self.load_failed(failure)
            else:
                self.begin_term(term, future.result())
                self.last_load_s = self.clock.now() - started
                log.info("%sin office (term %d): %d group(s) loaded in %.3fs", self.label, term, len(self.model.groups),
                         self.last_load_s,
                         extra={"event": "in_office", "term": term, "groups": len(self.model.groups)})

        loop.run_in_executor(None, self.store.load_all).add_done_callback(loaded)

    def release_parked(self) -> None:
        """Stopping: parked calls get COORDINATOR_NOT_AVAILABLE now (their members rediscover and
        retry) instead of hanging until the server's grace period cuts them off."""
        for effect in self.model.release_parked(pb.COORDINATOR_NOT_AVAILABLE, "the coordinator is shutting down"):
            if isinstance(effect, Reply):
                self._answer(effect.to, effect.response)

    # ------------------------------------------------------------------ discovery

    def locate(self, group_id: str) -> pb.CoordinatorLocation:
        """Where ``group_id``'s coordinator is, as this process sees it (FindCoordinator). One process
        (standalone, or the active of an active/standby pair) answers for every group: shard 0 of 1."""
        if not group_id:
            return pb.CoordinatorLocation(group_id=group_id, error=error(pb.INVALID_GROUP_ID, "empty group id"))
        if self.office.in_office():
            return pb.CoordinatorLocation(group_id=group_id, address=self.advertised, shard=0,
                                          epoch=self.office.term())
        active = self.office.active_address()
        if not active:
            return pb.CoordinatorLocation(group_id=group_id, shard=0, error=error(
                pb.COORDINATOR_NOT_AVAILABLE, "no coordinator is active right now, retry shortly"))
        return pb.CoordinatorLocation(group_id=group_id, address=active, shard=0)

    def describe_cluster(self) -> pb.DescribeClusterResponse:
        """This process's view of the cluster (DescribeCluster): one shard, led by the active process."""
        standalone = isinstance(self.office, Standalone)
        leading = self.office.in_office()
        leader = self.advertised if leading else self.office.active_address()
        state = pb.SHARD_LEADERLESS
        if leader:
            state = pb.SHARD_LOADING if self.loading else pb.SHARD_ACTIVE
        shard = pb.ShardInfo(shard=0, leader=leader, epoch=self.office.term() if leading else 0, state=state,
                             groups=len(self.model.groups) if leading else -1,
                             members=sum(len(g.members) for g in self.model.groups.values()) if leading else -1)
        coordinators = [pb.ClusterCoordinator(address=self.advertised, shards_led=1 if leading else 0, self=True)]
        if leader and leader != self.advertised:
            coordinators.append(pb.ClusterCoordinator(address=leader, shards_led=1))
        return pb.DescribeClusterResponse(shards=1, mode="standalone" if standalone else "active-standby",
                                          coordinators=coordinators, shard_infos=[shard])

    def waiting(self) -> int:
        """How many requests wait for their answer (held in a phase, or behind a write)."""
        return len(self._answers)

    def records(self) -> dict[str, Any]:
        """Each group's last durable record (for tests and tools)."""
        return dict(self._stored)
