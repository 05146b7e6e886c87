"""The embeddable worker client: join a group, run what it is assigned, stay alive.

One background thread walks the worker diagram of ``worker.states``; which error leads where
is the table of ``worker.rules``, and the membership's clock and deadlines are
``worker.session`` (both shared with ``AsyncWorkerClient``). This module is the thread's I/O:
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
from groupcoord.worker.leader import AssignorLookup, Recheck, sync_request
from groupcoord.worker.listener import JoinListener, TaskListener
from groupcoord.worker.metrics import watch_worker
from groupcoord.worker.ownership import Notice, Ownership
from groupcoord.worker.requests import heartbeat_request, join_request, leave_request, load_request
from groupcoord.worker.retry import join_retrying
from groupcoord.worker.rules import StableAction, rule_for
from groupcoord.worker.session import Membership
from groupcoord.worker.states import WorkerMachine, WorkerState
from groupcoord.worker.transport import ChannelFactory, GiveUp, Transport, WorkerClosedError
from groupcoord.worker.view import MemberView

__all__ = ["JoinListener", "TaskListener", "WorkerClient", "WorkerClosedError", "WorkerState"]

log = logging.getLogger("groupcoord.worker")

LoadReporter = Callable[["WorkerClient"], "pb.LoadReport | None"]


class WorkerClient(MemberView):
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
                                    security=config.security, group_id=config.group_id)
        self._session = Membership(config, monotonic)
        self._tasks = Ownership(self._deliver, self._cond, name=config.client_id)
        self._rebalance_requested = False
        self._recheck = Recheck(assignor_lookup, monotonic, name=config.client_id)
        self.fatal_error: BaseException | None = None
        self._leave_on_close = not config.instance_id
        self._thread = threading.Thread(target=self._run, name=f"groupcoord-worker-{config.client_id}", daemon=True)

    # ------------------------------------------------------------------ public API (and MemberView's)

    @property
    def coordinator_address(self) -> str:
        """Where the group's requests go now (FindCoordinator's answer, or the next bootstrap address)."""
        return self._transport.address

    @property
    def coordinator_lookups(self) -> int:
        """FindCoordinator rounds this worker asked (a growing count says its coordinator keeps moving)."""
        return self._transport.lookups

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
        except Exception as failure:
            self.fatal_error = failure
            rule = rule_for(failure)
            if rule is None:  # a bug: never die silently
                log.exception("%s: worker loop failed", self.config.client_id)
            else:
                self._leave_on_close = self._leave_on_close and rule.leaves
                log.error("%s: stopping: %s", self.config.client_id, failure)
        finally:
            try:
                rule = rule_for(self.fatal_error) if self.fatal_error is not None else None
                if rule is not None and rule.tasks_lost == "always":
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
            rule = rule_for(error)
            if self._closing.is_set() and not (rule is not None and rule.fatal):
                return
            raise

    def _backoff(self, seconds: float) -> None:
        """Sleep between join attempts. Cooperative tasks run on through a re-join only while the
        membership can still be alive: once a session has passed since the coordinator last
        confirmed it, it may have removed us and given them away, so they are lost then, not at the
        end of a backoff that can last 10 s."""
        first = self._session.backoff_split(seconds, bool(self._tasks.assigned))
        if first is not None:
            self._sleep(first)
            self._lose_if_session_over()
            seconds -= first
        self._sleep(seconds)

    def _lose_if_session_over(self) -> None:
        if self._session.session_over(bool(self._tasks.assigned)) and not self._closing.is_set():
            log.warning("%s: no answer from the coordinator for a session timeout while re-joining: "
                        "tasks lost", self.config.client_id)
            self._tasks.lose_all()

    # ------------------------------------------------------------------ join / sync

    def _join_and_sync(self) -> None:
        """One attempt, from PreparingJoin; any failure returns there (``fail``) before the backoff.
        Eager: every task stops first. Cooperative: tasks run on through the join (within the session)."""
        session = self._session
        if not session.cooperative():
            self._tasks.revoke_all()
        self._lose_if_session_over()
        self._machine.fire("join")
        try:
            join = self._join()
            if not session.cooperative():  # the group turned out eager (a member does not offer cooperative)
                self._tasks.revoke_all()
            self._machine.fire("joined")
            tasks = self._sync(join)
        except Exception as failure:
            _, lose = session.join_failed(failure)
            if lose:
                self._tasks.lose_all()
            self._machine.fire("fail")  # every row's ``joining`` trigger: a fatal one stops after this
            raise
        self._assign(tasks, join.generation)

    def _join(self) -> pb.JoinGroupResponse:
        session = self._session
        sent = self._monotonic()
        try:
            response = self._transport.join_group(join_request(self.config, session.member_id, self._tasks),
                                                  session.phase_timeout(), self._give_up(sent))
        except errors.MemberIdRequiredError as required:
            session.member_id = required.member_id
            log.info("%s: got member id %s", self.config.client_id, session.member_id)
            sent = self._monotonic()
            response = self._transport.join_group(join_request(self.config, session.member_id, self._tasks),
                                                  session.phase_timeout(), self._give_up(sent))
        session.joined(response, sent)
        listener = self.listener
        if isinstance(listener, JoinListener):
            self._call_listener("on_joined", lambda: listener.on_joined(session.member_id, response.generation,
                                                                         session.is_leader))
        return response

    def _sync(self, join: pb.JoinGroupResponse) -> tuple[TaskReplica, ...]:
        """The leader runs the assignor, unless told to skip it (KIP-814: a static leader back in a
        Stable group gets the group's assignment as it is); everyone else just asks."""
        request = sync_request(self._assignor_lookup, self.config, self.member_id, self.is_leader, join)
        response = self._transport.sync_group(request, self._session.phase_timeout(),
                                              self._give_up(self._monotonic()))
        self._session.synced(response)
        return replicas_from_pb(response.tasks)

    def _give_up(self, sent: float) -> GiveUp | None:
        """Cooperative tasks run on through an unanswered JoinGroup or SyncGroup only until the
        coordinator could have removed us (``Membership.give_up_in``), not until the call's deadline."""
        seconds = self._session.give_up_in(sent, bool(self._tasks.assigned))
        return None if seconds is None else (seconds, self._lose_unanswered)

    def _lose_unanswered(self) -> None:
        if self._tasks.assigned and not self._closing.is_set():
            call = "JoinGroup" if self.state is WorkerState.JOINING else "SyncGroup"
            log.warning("%s: no answer to our %s by the time the coordinator could have removed us: tasks lost "
                        "(they come back if the answer keeps us)", self.config.client_id, call)
            self._tasks.lose_all()

    # ------------------------------------------------------------------ stable

    def _stable_tick(self) -> None:
        session = self._session
        self._sleep(session.next_heartbeat_s())
        if self._closing.is_set():
            return
        if self._rebalance_requested:
            self._rebalance_requested = False
            self._machine.fire("rejoin")
            return
        request = heartbeat_request(self.config, session.member_id, session.generation)
        sent = self._monotonic()  # the coordinator restarts our session after this: count from here
        try:
            self._transport.heartbeat(request, session.stable_timeout())
        except errors.GroupCoordError as error:
            verdict = session.heartbeat_failed(error, sent)
            if verdict.lose_tasks:
                self._tasks.lose_all()
            if verdict.action is StableAction.STOP:
                raise
            if verdict.action is StableAction.REJOIN:
                self._machine.fire("rejoin")
            return
        session.heartbeat_ok(sent)
        self._report_load()
        if self.is_leader and self._recheck.wants_rebalance(self.protocol, self.generation,
                                                             self._describe_with_snapshot):
            self._machine.fire("rejoin")

    def _describe_with_snapshot(self) -> pb.DescribeGroupResponse:
        request = pb.DescribeGroupRequest(group_id=self.config.group_id, include_load_snapshot=True)
        return self._transport.describe_group(request, self._session.stable_timeout())

    def _report_load(self) -> None:
        if self._load_reporter is None:
            return
        try:
            report = self._load_reporter(self)
            if report is None:
                return
            request = load_request(self.config, self.member_id, self.generation, report)
            self._transport.report_load(request, self._session.stable_timeout())
        except WorkerClosedError:
            raise
        except errors.GroupCoordError as error:
            log.info("%s: load report not sent: %s", self.config.client_id, error)
        except Exception:
            log.exception("%s: load reporter failed", self.config.client_id)

    # ------------------------------------------------------------------ listener and leave

    def _assign(self, tasks: tuple[TaskReplica, ...], generation: int) -> None:
        self._recheck.reset()
        self._session.assigned()
        self._machine.fire("synced")
        revoked = self._tasks.apply(tasks, generation, cooperative=self._session.cooperative())
        if revoked or self._session.rejoin_after_sync:  # cooperative: the freed tasks move in the next generation
            log.info("%s: %d task(s) revoked in generation %d: re-joining at once", self.config.client_id,
                     len(revoked), generation)
            self._machine.fire("rejoin")

    def _deliver(self, notice: Notice) -> None:
        """Tell the listener, on this thread; an exception is logged, never fatal."""
        self._call_listener(notice.callback, lambda: notice.call(self.listener))

    def _call_listener(self, callback: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception:
            log.exception("%s: listener %s raised; carrying on", self.config.client_id, callback)

    def _leave(self) -> None:
        session = self._session
        if not session.member_id or not self._leave_on_close:
            if session.member_id:
                log.info("%s: static member %s closes without leaving: its session timeout decides",
                         self.config.client_id, self.config.instance_id)
            return
        request = leave_request(self.config, session.member_id)
        if self._transport.leave_group(request, timeout=min(5.0, self.config.request_timeout_ms / 1000)):
            log.info("%s: left group %s", self.config.client_id, self.config.group_id)
        session.member_id = ""
        session.generation = -1
