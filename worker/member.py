"""The worker's member, written once: lookup aside, every step of join, sync, assign, heartbeat, load
report, leader re-check, give-up and leave, with no I/O.

``Member.run()`` and ``Member.shutdown()`` are generators (the shape of ``worker.transport.lookup_round``):
they yield the effects of ``worker.effects`` (make this call, sleep, tell the listener, ask the load
reporter) and are sent what came of each, or have the call's error thrown in. Transitions of the worker
diagram (``worker.states``) fire here; the membership's clock and deadlines are ``worker.session``; which
error leads where is the table of ``worker.rules``. ``WorkerClient`` (a thread) and ``AsyncWorkerClient``
(a task on the service's loop) only carry the effects out.

Why generators rather than a ``handle(stimulus) -> instructions`` machine: the member's choreography is
a sequence (revoke, join, maybe join again with the id the coordinator gave, sync, assign) with a call
in the middle of each step, and a generator keeps that sequence readable as one function whose local
variables (when the call was sent, the JoinGroup answer) live across the call, where a stimulus machine
would have to name a state for every point between two calls. Each driver is then one loop.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Generator
from typing import Any

from groupcoord import errors
from groupcoord.assignors.base import TaskReplica
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import replicas_from_pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import Call, Effect, Joined, Sleep, WorkerClosedError
from groupcoord.worker.leader import AssignorLookup, Recheck, sync_request
from groupcoord.worker.member_end import MemberEnd
from groupcoord.worker.ownership import Notice, Ownership
from groupcoord.worker.requests import heartbeat_request, join_request, leave_request
from groupcoord.worker.retry import retried, wait_s
from groupcoord.worker.rules import ErrorRule, StableAction, rule_for
from groupcoord.worker.session import Membership
from groupcoord.worker.states import WorkerMachine, WorkerState
from groupcoord.worker.stream_tags import Nudge, NudgeKind

__all__ = ["ListenerHungError", "Member"]

log = logging.getLogger("groupcoord.worker")

Gen = Generator[Effect, Any, Any]
"""A step of the member: yields effects, is sent their outcomes, returns the step's result."""


class ListenerHungError(errors.UnknownMemberIdError):
    """A listener hung past the rebalance timeout during a join: the member left; join again as a new one."""


class Member(MemberEnd):
    """One worker's membership and protocol; its driver sets ``closing`` and ``rebalance_requested``."""

    def __init__(
        self, config: WorkerConfig, *, assignor_lookup: AssignorLookup, monotonic: Callable[[], float],
        on_change: Callable[[WorkerState, WorkerState], None] | None = None,
        on_tasks: Callable[[], None] | None = None, where: Callable[[], str] = lambda: "",
        load_reports: bool = False, rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._now = monotonic
        self._where = where  # the coordinator the next call goes to (for the log)
        self._load_reports = load_reports
        self._rng = rng
        self.machine = WorkerMachine(name=config.client_id, on_change=on_change)
        self.session = Membership(config, monotonic)
        self.pending: list[Notice] = []
        self.tasks = Ownership(self.pending.append, name=config.client_id, on_set=on_tasks)
        self.recheck = Recheck(assignor_lookup, monotonic, name=config.client_id)
        self._assignor_lookup = assignor_lookup
        self.closing = False
        self.rebalance_requested = False
        self.join_told = False  # the stream told of a rebalance of our generation: join at the next tick
        self.leave_on_close = not config.instance_id
        self.fatal_error: BaseException | None = None
        self.shut_down = False

    # ------------------------------------------------------------------ the loop and its end (``worker.member_end``)

    def _stopped_by(self, rule: ErrorRule) -> None:
        self.leave_on_close = self.leave_on_close and rule.leaves

    def give_up_unanswered(self) -> list[Notice]:
        """A JoinGroup or SyncGroup is still unanswered when the coordinator could have removed us
        (``Call.give_up_in``): the tasks are lost now (an answer that keeps us gives them back). Returns
        the notices the driver delivers at once, while it goes on waiting for the answer."""
        if self.tasks.assigned and not self.closing:
            call = "JoinGroup" if self.machine.state is WorkerState.JOINING else "SyncGroup"
            log.warning("%s: no answer to our %s by the time the coordinator could have removed us: tasks lost "
                        "(they come back if the answer keeps us)", self.config.client_id, call)
            self.tasks.lose_all()
        notices, self.pending[:] = list(self.pending), []
        return notices

    def hear(self, nudge: Nudge) -> bool:
        """News from the coordinator's stream (any thread). Returns True when the driver should cut the
        heartbeat wait short. A rebalance of our generation started: the member joins now, with no
        heartbeat first (the coordinator tells it only once the rebalance's record is stored, so it is
        real: a failed write is never told). Any other news (a reconnected stream, a moved coordinator)
        makes it heartbeat now, and the answer decides as it always does. The member's rules (its
        session, its tasks' safe moment) are the same with or without news."""
        if self.machine.state is not WorkerState.STABLE:
            return False  # joining or syncing: the call in flight is the news it needs
        if nudge.kind is NudgeKind.JOIN:
            if 0 <= nudge.generation < self.session.generation:
                return False  # a rebalance we already joined past
            self.join_told = True
        return True

    # ------------------------------------------------------------------ join / sync

    def _join_with_retry(self) -> Gen:
        """Attempts until one syncs: at once or after the backoff as the failure's row says, never on a
        fatal row (raised), and not once the client is closing."""
        attempt = 0
        while not self.closing:
            attempt += 1
            try:
                yield from self._join_and_sync()
                return
            except WorkerClosedError:
                return
            except Exception as error:
                rule = rule_for(error)
                if self.closing and not (rule is not None and rule.fatal):
                    return
                if not retried(error):
                    raise
                wait = wait_s(self.config, error, attempt, self._rng)
                if wait:
                    log.warning("%s: %s; retrying in %.2fs (attempt %d, coordinator %s)",
                                self.config.client_id, error, wait, attempt, self._where())
                yield from self._backoff(wait)

    def _backoff(self, seconds: float) -> Gen:
        """Sleep between join attempts. Cooperative tasks run on through a re-join only while the
        membership can still be alive: once a session has passed since the coordinator last confirmed
        it, it may have removed us and given them away, so they are lost then, not at the end of a
        backoff that can last 10 s."""
        first = self.session.backoff_split(seconds, bool(self.tasks.assigned))
        if first is not None:
            yield Sleep(first)
            yield from self._lose_if_session_over()
            seconds -= first
        yield Sleep(seconds)

    def _lose_if_session_over(self) -> Gen:
        if self.session.session_over(bool(self.tasks.assigned)) and not self.closing:
            log.warning("%s: no answer from the coordinator for a session timeout while re-joining: "
                        "tasks lost", self.config.client_id)
            self.tasks.lose_all()
            yield from self._flush()

    def _join_and_sync(self) -> Gen:
        """One attempt, from PreparingJoin; any failure returns there (``fail``) before the backoff.
        Eager: every task stops first. Cooperative: tasks run on through the join (within the session)."""
        session = self.session
        if not session.cooperative():
            self.tasks.revoke_all()
            yield from self._flush()
        yield from self._lose_if_session_over()
        self.machine.fire("join")
        try:
            join = yield from self._join()
            if not session.cooperative():  # the group turned out eager (a member does not offer cooperative)
                self.tasks.revoke_all()
                if not (yield from self._flush()):
                    raise ListenerHungError("left the group: a listener did not return within the rebalance timeout")
            self.machine.fire("joined")
            tasks = yield from self._sync(join)
        except Exception as failure:
            _, lose = session.join_failed(failure)
            if lose:
                self.tasks.lose_all()
            self.machine.fire("fail")  # every row's ``joining`` trigger: a fatal one stops after this
            yield from self._flush()
            raise
        yield from self._assign(tasks, join.generation)

    def _join_call(self) -> tuple[Call, float]:
        sent = self._now()
        request = join_request(self.config, self.session.member_id, self.tasks)
        return Call("join_group", request, self.session.phase_timeout(), self._give_up_in(sent)), sent

    def _join(self) -> Gen:
        session = self.session
        call, sent = self._join_call()
        try:
            response = yield call
        except errors.MemberIdRequiredError as required:
            session.member_id = required.member_id
            log.info("%s: got member id %s", self.config.client_id, session.member_id)
            call, sent = self._join_call()
            response = yield call
        session.joined(response, sent)
        yield Joined(session.member_id, response.generation, session.is_leader)
        return response

    def _sync(self, join: pb.JoinGroupResponse) -> Gen:
        """The leader runs the assignor, unless told to skip it (KIP-814); everyone else just asks."""
        session = self.session
        request = sync_request(self._assignor_lookup, self.config, session.member_id, session.is_leader, join)
        response = yield Call("sync_group", request, session.phase_timeout(), self._give_up_in(self._now()))
        session.synced(response)
        tasks: tuple[TaskReplica, ...] = replicas_from_pb(response.tasks)
        return tasks

    def _give_up_in(self, sent: float) -> float | None:
        """Cooperative tasks run on through an unanswered JoinGroup or SyncGroup only until the
        coordinator could have removed us (``Membership.give_up_in``), not until the call's deadline."""
        seconds = self.session.give_up_in(sent, bool(self.tasks.assigned))
        return None if seconds is None else max(0.0, seconds)

    def _assign(self, tasks: tuple[TaskReplica, ...], generation: int) -> Gen:
        self.join_told = False  # news of a rebalance before this generation is spent
        self.recheck.reset()
        self.session.assigned()
        self.machine.fire("synced")
        revoked = self.tasks.apply(tasks, generation, cooperative=self.session.cooperative())
        if not (yield from self._flush()):
            self._rejoin()
        elif revoked or self.session.rejoin_after_sync:  # cooperative: the freed tasks move next generation
            log.info("%s: %d task(s) revoked in generation %d: re-joining at once", self.config.client_id,
                     len(revoked), generation)
            self._rejoin()

    def _rejoin(self) -> None:
        if self.machine.state is WorkerState.STABLE:
            self.machine.fire("rejoin")

    # ------------------------------------------------------------------ stable

    def _stable_tick(self) -> Gen:
        session = self.session
        wait = session.next_heartbeat_s()
        left = session.tasks_left() if self.tasks.assigned else None
        yield Sleep(wait if left is None else max(0.0, min(wait, left)), heartbeat=True)
        if self.closing:
            return
        if (yield from self._lose_if_unconfirmed()):
            return
        if self.rebalance_requested or self.join_told:
            self.rebalance_requested = self.join_told = False
            self._rejoin()
            return
        request = heartbeat_request(self.config, session.member_id, session.generation)
        sent = self._now()  # the coordinator restarts our session after this: count from here
        timeout = session.stable_timeout()
        if self.tasks.assigned:  # unanswered, the call must not outlast the tasks' last safe moment
            timeout = max(0.001, min(timeout, session.tasks_left()))
        try:
            yield Call("heartbeat", request, timeout)
        except errors.GroupCoordError as error:
            verdict = session.heartbeat_failed(error, sent)
            if verdict.lose_tasks:
                self.tasks.lose_all()
                yield from self._flush()
            if verdict.action is StableAction.STOP:
                raise  # the tasks go in ``shutdown``, as the row says (fenced: lost, never revoked)
            if verdict.action is StableAction.REJOIN:
                self._rejoin()
                return
            yield from self._lose_if_unconfirmed()
            return
        session.heartbeat_ok(sent)
        yield from self._report_load(session.member_id, session.generation, session.stable_timeout())
        if session.is_leader and (yield from self._load_recheck()):
            self._rejoin()

    def _lose_if_unconfirmed(self) -> Gen:
        """Stable with heartbeats unanswered: once the session since the coordinator last confirmed us,
        less the worker's margin (``worker.give_up``), has passed, the coordinator may remove us at any
        moment and hand our tasks on (pushed news makes the others take them within a round trip), so
        every task stops now, eager or cooperative, and the member joins again. Returns True if so."""
        if not self.tasks.assigned or self.closing or self.session.tasks_left() > 0:
            return False
        log.warning("%s: no heartbeat answered for a session timeout less the margin: tasks lost, re-joining",
                    self.config.client_id)
        self.tasks.lose_all()
        yield from self._flush()
        self._rejoin()
        return True

    def _load_recheck(self) -> Gen:
        """Leader only: the assignor's ``RebalanceCheck`` on the newest load snapshot, when one is due."""
        check = self.recheck.due(self.session.protocol)
        if check is None:
            return False
        request = pb.DescribeGroupRequest(group_id=self.config.group_id, include_load_snapshot=True)
        try:
            described = yield Call("describe_group", request, self.session.stable_timeout())
        except errors.GroupCoordError as error:
            log.info("%s: load re-check skipped: %s", self.config.client_id, error)
            return False
        return self.recheck.judge(check, self.session.protocol, self.session.generation, described)

    # ------------------------------------------------------------------ listeners and leave

    def _leave_after_hang(self) -> Gen:
        """Leave the group now (static members too), so the tasks move without waiting for our session."""
        session = self.session
        if session.member_id:
            log.error("%s: leaving the group: a listener hung past the rebalance timeout", self.config.client_id)
            yield Call("leave_group", leave_request(self.config, session.member_id), self._leave_timeout())
        session.reset(RuntimeError("a listener hung"))
        self.tasks.lose_all()

    def _leave_timeout(self) -> float:
        return min(5.0, self.config.request_timeout_ms / 1000)

    def _leave(self) -> Gen:
        session = self.session
        if not session.member_id or not self.leave_on_close:
            if session.member_id:
                log.info("%s: static member %s closes without leaving: its session timeout decides",
                         self.config.client_id, self.config.instance_id)
            return
        if (yield Call("leave_group", leave_request(self.config, session.member_id), self._leave_timeout())):
            log.info("%s: left group %s", self.config.client_id, self.config.group_id)
        session.member_id = ""
        session.generation = -1
