"""The embeddable worker client: join a group, run what it is assigned, stay alive.

One background thread walks the worker diagram of ``worker.states`` (the table, and
which error leads where); this module is that loop and the protocol's logic.
``worker.transport`` carries the calls (deadlines, rediscovery, cancel, leave),
``worker.leader`` runs the assignor, ``worker.retry`` is the backoff policy.

Heartbeats run only in Stable (the same thread does both, so they are off while
joining or syncing). Before re-joining the worker revokes (stops) its tasks: the
eager protocol. In Stable, losing the coordinator does not stop tasks until the
session timeout has passed without a successful heartbeat (a coordinator failover
keeps tasks running); calls in Stable give up after half the session, so a hung
coordinator is left in time to reach the new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Self

from prometheus_client import CollectorRegistry

from groupcoord import errors
from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.registry import get_assignor
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import replicas_from_pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.give_up import give_up_at
from groupcoord.worker.leader import AssignorLookup, Recheck, leader_sync_request
from groupcoord.worker.listener import JoinListener, TaskListener
from groupcoord.worker.metrics import watch_worker
from groupcoord.worker.ownership import Ownership
from groupcoord.worker.requests import heartbeat_request, join_request, leave_request
from groupcoord.worker.retry import join_retrying
from groupcoord.worker.states import WorkerMachine, WorkerState
from groupcoord.worker.transport import ChannelFactory, GiveUp, Transport, WorkerClosedError

__all__ = ["JoinListener", "TaskListener", "WorkerClient", "WorkerClosedError", "WorkerState"]

log = logging.getLogger("groupcoord.worker")

LoadReporter = Callable[["WorkerClient"], "pb.LoadReport | None"]


class WorkerClient:
    """Join ``config.group_id`` and keep ``listener`` told what this process must run.

    Use ``start()`` then ``close()`` (or a ``with`` block). ``generation`` and
    ``assigned_tasks`` let a service fence its own side effects: act on a task
    only while it is assigned in the current generation.
    """

    def __init__(
        self,
        config: WorkerConfig,
        listener: TaskListener,
        *,
        assignor_lookup: AssignorLookup = get_assignor,
        channel_factory: ChannelFactory | None = None,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        load_reporter: LoadReporter | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.listener = listener
        self._assignor_lookup = assignor_lookup
        self._closing = threading.Event()
        self._sleep = sleep or self._wait_unless_closing
        self._monotonic = monotonic
        self._load_reporter = load_reporter
        self._cond = threading.Condition()
        # metrics only on a registry the service gives (its state, rebalance time and tasks; see worker.metrics)
        rebalance_time = None if metrics_registry is None else watch_worker(metrics_registry, self, monotonic)
        self._machine = WorkerMachine(self._cond, name=config.client_id,
                                      on_change=rebalance_time.changed if rebalance_time is not None else None)
        # reconnect within a heartbeat interval of the coordinator's return (gRPC's default backoff grows
        # to seconds during an outage, long enough to lose a session the outage itself would not)
        self._transport = Transport(config.coordinators, channel_factory, name=config.client_id,
                                    reconnect_backoff_max_ms=min(500, config.heartbeat_interval_ms),
                                    security=config.security)
        self._member_id = ""
        self._generation = -1
        self._leader_id = ""
        self._protocol = ""
        self._tasks = Ownership(listener, self._cond, name=config.client_id)
        # the rebalance protocol of the last generation (before the first: what we offer)
        self._rebalance_protocol = config.rebalance_protocol
        self._last_heartbeat_ok = monotonic()
        self._heartbeats_failed = 0  # heartbeats in a row the coordinator did not answer (outage)
        self._rebalance_requested = False
        self._recheck = Recheck(assignor_lookup, monotonic, name=config.client_id)
        self.fatal_error: BaseException | None = None
        self._leave_on_close = not config.instance_id
        self._rejoin_after_sync = False
        self._thread = threading.Thread(target=self._run, name=f"groupcoord-worker-{config.client_id}", daemon=True)

    # ------------------------------------------------------------------ public API

    @property
    def state(self) -> WorkerState:
        return self._machine.state

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def leader_id(self) -> str:
        return self._leader_id

    @property
    def is_leader(self) -> bool:
        return bool(self._member_id) and self._member_id == self._leader_id

    @property
    def protocol(self) -> str:
        return self._protocol

    @property
    def assigned_tasks(self) -> tuple[TaskReplica, ...]:
        return self._tasks.assigned

    @property
    def rebalance_protocol(self) -> str:
        """"eager" or "cooperative": how the current generation rebalances."""
        return self._rebalance_protocol

    @property
    def coordinator_address(self) -> str:
        return self._transport.address

    def start(self) -> Self:
        if self._thread.ident is not None:
            raise RuntimeError("a WorkerClient can be started once")
        self._machine.fire("start")
        self._thread.start()
        return self

    def wait_until(self, predicate: Callable[[WorkerClient], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked at every state change) or the timeout passes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.fatal_error is not None:
                    return predicate(self)
                self._cond.wait(remaining)
        return True

    def wait_until_stable(self, timeout: float = 30.0) -> bool:
        return self.wait_until(lambda w: w.state is WorkerState.STABLE, timeout)

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (the worker re-joins at its next heartbeat tick)."""
        self._rebalance_requested = True
        with self._cond:
            self._cond.notify_all()

    def close(self, timeout: float = 10.0, *, leave_group: bool | None = None) -> None:
        """Stop tasks, leave the group (LeaveGroup) and stop the thread; a call in flight is cancelled.

        A static member (``instance_id``) does not leave by default: a restart within its session
        timeout then costs no rebalance. ``leave_group=True`` makes it leave (a scale-in),
        ``False`` keeps a dynamic member in the group until its session expires."""
        if leave_group is not None:
            self._leave_on_close = leave_group
        self._closing.set()
        self._transport.abort()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._transport.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                if self.state is WorkerState.STABLE:
                    self._stable_tick()
                else:
                    self._join_and_sync_with_retry()
        except WorkerClosedError:
            pass
        except errors.FencedInstanceIdError as fenced:  # another process is this instance now
            self.fatal_error = fenced
            self._leave_on_close = False  # the group is not ours to leave any more
            log.error("%s: fenced: %s; stopping, tasks revoked", self.config.client_id, fenced)
        except errors.RequestError as fatal:
            self.fatal_error = fatal
            log.error("%s: stopping: %s", self.config.client_id, fatal)
        except Exception as bug:  # never die silently
            self.fatal_error = bug
            log.exception("%s: worker loop failed", self.config.client_id)
        finally:
            try:
                if isinstance(self.fatal_error, errors.FencedInstanceIdError):
                    self._tasks.lose_all()
                else:
                    self._tasks.revoke_all()
                self._leave()
            finally:
                self._machine.fire("stop")

    def _wait_unless_closing(self, seconds: float) -> None:
        self._closing.wait(seconds)

    def _join_and_sync_with_retry(self) -> None:
        retrying = join_retrying(
            self.config, sleep=self._backoff, stopped=self._closing.is_set, where=lambda: self._transport.address
        )
        try:
            for attempt in retrying:
                with attempt:
                    if self._closing.is_set():
                        raise WorkerClosedError("closing")
                    self._join_and_sync()
        except WorkerClosedError:
            return
        except errors.GroupCoordError as error:
            if self._closing.is_set() and not isinstance(error, errors.RequestError):
                return
            raise

    def _backoff(self, seconds: float) -> None:
        """Sleep between join attempts. Cooperative tasks run on through a re-join only while the
        membership can still be alive: once a session has passed since the coordinator last
        confirmed it, it may have removed us and given them away, so they are lost then, not at the
        end of a backoff that can last 10 s."""
        left = self._session_left()
        if self._cooperative() and self._tasks.assigned and left < seconds:
            self._sleep(max(0.0, left))
            self._lose_if_session_over()
            seconds -= max(0.0, left)
        self._sleep(seconds)

    def _session_left(self) -> float:
        return self.config.session_timeout_ms / 1000 - (self._monotonic() - self._last_heartbeat_ok)

    def _lose_if_session_over(self) -> None:
        if self._cooperative() and self._tasks.assigned and self._session_left() <= 0 and not self._closing.is_set():
            log.warning("%s: no answer from the coordinator for a session timeout while re-joining: "
                        "tasks lost", self.config.client_id)
            self._tasks.lose_all()

    # ------------------------------------------------------------------ join / sync

    def _join_and_sync(self) -> None:
        """One attempt, from PreparingJoin; any failure returns there (``fail``) before the backoff.
        Eager: every task stops first. Cooperative: tasks run on through the join (within the session)."""
        if not self._cooperative():
            self._tasks.revoke_all()
        self._lose_if_session_over()
        self._machine.fire("join")
        try:
            join = self._join()
            self._rebalance_protocol = join.rebalance_protocol or "eager"
            if not self._cooperative():  # the group turned out eager (a member does not offer cooperative)
                self._tasks.revoke_all()
            self._machine.fire("joined")
            tasks = self._sync(join)
        except Exception as failure:
            if isinstance(failure, errors.ResetNeeded):
                self._reset_membership(failure)
            elif isinstance(failure, errors.MemberIdRequiredError) and failure.member_id:
                self._member_id = failure.member_id  # asked twice in a row: join with the newest id
            self._machine.fire("fail")
            raise
        self._assign(tasks, join.generation)

    def _phase_timeout(self) -> float:
        """Deadline (s) of JoinGroup / SyncGroup: the coordinator holds them up to the rebalance timeout."""
        return (self.config.rebalance_timeout_ms + self.config.request_timeout_ms) / 1000

    def _join(self) -> pb.JoinGroupResponse:
        sent = self._monotonic()
        try:
            response = self._transport.join_group(join_request(self.config, self._member_id, self._tasks),
                                                  self._phase_timeout(), self._give_up(sent))
        except errors.MemberIdRequiredError as required:
            self._member_id = required.member_id
            log.info("%s: got member id %s", self.config.client_id, self._member_id)
            sent = self._monotonic()
            response = self._transport.join_group(join_request(self.config, self._member_id, self._tasks),
                                                  self._phase_timeout(), self._give_up(sent))
        self._last_heartbeat_ok = sent  # answered: the coordinator restarted our session
        self._member_id = response.member_id
        self._generation = response.generation
        self._leader_id = response.leader_id
        self._protocol = response.protocol
        log.info(
            "%s: joined generation %d as %s (leader %s, assignor %s)",
            self.config.client_id, response.generation,
            "leader" if self.is_leader else "follower", response.leader_id, response.protocol,
        )
        listener = self.listener
        if isinstance(listener, JoinListener):
            self._tasks.notify("on_joined", lambda: listener.on_joined(self._member_id, response.generation, self.is_leader))
        return response

    def _sync(self, join: pb.JoinGroupResponse) -> tuple[TaskReplica, ...]:
        """The leader runs the assignor, unless told to skip it (KIP-814: a static leader back in a
        Stable group gets the group's assignment as it is); everyone else just asks."""
        cfg = self.config
        if self.is_leader and not join.skip_assignment:
            request = leader_sync_request(self._assignor_lookup, cfg.group_id, self._member_id, join, name=cfg.client_id)
        else:
            request = pb.SyncGroupRequest(group_id=cfg.group_id, member_id=self._member_id, generation=join.generation)
        request.instance_id = cfg.instance_id
        request.protocol_type = join.protocol_type  # KIP-559: the coordinator checks we agree
        request.protocol_name = join.protocol
        response = self._transport.sync_group(request, self._phase_timeout(), self._give_up(self._monotonic()))
        self._rejoin_after_sync = response.rejoin
        return replicas_from_pb(response.tasks)

    def _give_up(self, sent: float) -> GiveUp | None:
        """Cooperative tasks run on through a JoinGroup or SyncGroup only until the coordinator could
        have removed us (``worker.give_up``), not until the call's own deadline."""
        if not self._cooperative() or not self._tasks.assigned:
            return None
        cfg = self.config
        at = give_up_at(last_answer=self._last_heartbeat_ok, sent=sent, session_timeout_s=cfg.session_timeout_ms / 1000,
                        rebalance_timeout_s=cfg.rebalance_timeout_ms / 1000)
        return at - self._monotonic(), self._lose_unanswered

    def _lose_unanswered(self) -> None:
        if self._tasks.assigned and not self._closing.is_set():
            call = "JoinGroup" if self.state is WorkerState.JOINING else "SyncGroup"
            log.warning("%s: no answer to our %s by the time the coordinator could have removed us: tasks lost "
                        "(they come back if the answer keeps us)", self.config.client_id, call)
            self._tasks.lose_all()

    def _reset_membership(self, error: errors.GroupCoordError) -> None:
        """The coordinator forgot us (or our generation): what we run may be someone else's now."""
        log.info("%s: %s: resetting member id and generation", self.config.client_id, error)
        self._member_id = ""
        self._generation = -1
        if self._cooperative():
            self._tasks.lose_all()

    def _cooperative(self) -> bool:
        return self._rebalance_protocol == "cooperative"

    # ------------------------------------------------------------------ stable

    def _stable_tick(self) -> None:
        cfg = self.config
        self._sleep(self._next_heartbeat_s())
        if self._closing.is_set():
            return
        if self._rebalance_requested:
            self._rebalance_requested = False
            self._machine.fire("rejoin")
            return
        request = heartbeat_request(cfg, self._member_id, self._generation)
        sent = self._monotonic()  # the coordinator restarts our session after this: count from here
        try:
            self._transport.heartbeat(request, self._stable_timeout())
        except errors.CoordinatorMovedError as moved:  # the transport has moved on to the next coordinator
            self._heartbeats_failed += 1
            silent_for = self._monotonic() - self._last_heartbeat_ok
            if silent_for * 1000 >= cfg.session_timeout_ms:
                log.warning("%s: no heartbeat for %.1fs (> session timeout): re-joining", cfg.client_id, silent_for)
                if self._cooperative():
                    self._tasks.lose_all()  # the coordinator may have given them away meanwhile
                self._machine.fire("rejoin")
            else:
                log.warning("%s: %s; keeping tasks, next heartbeat to %s", cfg.client_id, moved, self._transport.address)
            return
        except errors.FencedInstanceIdError:
            raise  # fatal: a newer process of this instance owns the membership
        except errors.GroupCoordError as error:
            log.info("%s: heartbeat: %s; re-joining", cfg.client_id, error)
            if isinstance(error, errors.RebalanceInProgressError):
                self._last_heartbeat_ok = sent  # answered all the same: the coordinator restarted our session
            if isinstance(error, errors.ResetNeeded):
                self._reset_membership(error)
            self._machine.fire("rejoin")
            return
        self._last_heartbeat_ok = sent
        self._heartbeats_failed = 0
        self._report_load()
        if self.is_leader and self._recheck.wants_rebalance(self._protocol, self._generation,
                                                             self._describe_with_snapshot):
            self._machine.fire("rejoin")

    def _next_heartbeat_s(self) -> float:
        """A heartbeat interval; after heartbeats the coordinator did not answer, sooner (the retry
        backoff, doubling, at most the interval), so a coordinator that comes back after a short
        outage hears from its members at once, before their sessions run out."""
        interval = self.config.heartbeat_interval_ms / 1000
        if not self._heartbeats_failed:
            return interval
        backoff: float = self.config.retry_backoff_ms / 1000 * 2.0 ** min(self._heartbeats_failed - 1, 16)
        return min(interval, backoff)

    def _stable_timeout(self) -> float:
        """Deadline (s) of a call in Stable: half the session at most (a hung coordinator is left in
        time to reach the next one, as Kafka's consumer marks it unknown), never past the session's
        end, at least a heartbeat interval so a slow answer can arrive."""
        cfg = self.config
        session = cfg.session_timeout_ms / 1000
        left = session - (self._monotonic() - self._last_heartbeat_ok)
        return max(cfg.heartbeat_interval_ms / 1000, min(cfg.request_timeout_ms / 1000, session / 2, left))

    def _describe_with_snapshot(self) -> pb.DescribeGroupResponse:
        request = pb.DescribeGroupRequest(group_id=self.config.group_id, include_load_snapshot=True)
        return self._transport.describe_group(request, self._stable_timeout())

    def _report_load(self) -> None:
        if self._load_reporter is None:
            return
        try:
            report = self._load_reporter(self)
            if report is None:
                return
            request = pb.ReportLoadRequest(
                group_id=self.config.group_id, member_id=self._member_id, generation=self._generation, report=report
            )
            self._transport.report_load(request, self._stable_timeout())
        except WorkerClosedError:
            raise
        except errors.GroupCoordError as error:
            log.info("%s: load report not sent: %s", self.config.client_id, error)
        except Exception:
            log.exception("%s: load reporter failed", self.config.client_id)

    # ------------------------------------------------------------------ listener and leave

    def _assign(self, tasks: tuple[TaskReplica, ...], generation: int) -> None:
        self._recheck.reset()
        self._last_heartbeat_ok = self._monotonic()
        self._machine.fire("synced")
        revoked = self._tasks.apply(tasks, generation, cooperative=self._cooperative())
        if revoked or self._rejoin_after_sync:  # cooperative: the freed tasks move in the next generation
            log.info("%s: %d task(s) revoked in generation %d: re-joining at once", self.config.client_id,
                     len(revoked), generation)
            self._machine.fire("rejoin")

    def _leave(self) -> None:
        if not self._member_id or not self._leave_on_close:
            if self._member_id:
                log.info("%s: static member %s closes without leaving: its session timeout decides",
                         self.config.client_id, self.config.instance_id)
            return
        request = leave_request(self.config, self._member_id)
        if self._transport.leave_group(request, timeout=min(5.0, self.config.request_timeout_ms / 1000)):
            log.info("%s: left group %s", self.config.client_id, self.config.group_id)
        self._member_id = ""
        self._generation = -1
