"""The worker's member in the consumer protocol (KIP-848's shape), written once and with no I/O.

The classic core (``worker.member``) walks JoinGroup, SyncGroup and Heartbeat; this one sends one
RPC, GroupHeartbeat, and is driven the same way: ``run()`` and ``shutdown()`` are generators that
yield the effects of ``worker.effects`` and are sent what came of each (or have the call's error
thrown in). ``WorkerClient`` and ``AsyncWorkerClient`` pick this core when ``config.protocol`` is
"consumer"; the diagram (``worker.states``) and the error table (``worker.rules``) are the same.

What the member does, after Kafka's ``ConsumerMembershipManager``:

* join with epoch 0 (Joining), then Stable: heartbeat at the coordinator's interval;
* an answer with an assignment is the whole set the member may run: tasks it runs that are not
  listed stop first (``on_revoked``), new ones start (``on_assigned``), and the next heartbeat,
  sent at once, tells the coordinator what runs now (``owned``): a task is reported released only
  after its listener returned;
* FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: everything is lost (``on_lost``: the coordinator may have
  given it away), then join again with epoch 0;
* nothing heard for a session (less a margin): the same, before the tasks could run elsewhere;
* UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR and the other request errors stop the worker with
  the coordinator's message (``fatal_error``);
* close: tasks revoked, then a leave with epoch -1 (a static member: -2, its tasks wait for its
  next process through its session).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Generator
from typing import Any

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import replicas_from_pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.consumer_leader import LeaderJobs
from groupcoord.worker.consumer_session import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerSession,
    beat_request,
    join_request,
    leave_request,
)
from groupcoord.worker.effects import Call, Effect, Joined, Offload, Sleep, WorkerClosedError
from groupcoord.worker.leader import AssignorLookup
from groupcoord.worker.member_end import MemberEnd
from groupcoord.worker.ownership import Notice, Ownership
from groupcoord.worker.retry import retried, wait_s
from groupcoord.worker.rules import ErrorRule, rule_for
from groupcoord.worker.states import WorkerMachine, WorkerState
from groupcoord.worker.stream_tags import Nudge

__all__ = ["ConsumerMember"]

log = logging.getLogger("groupcoord.worker")

Gen = Generator[Effect, Any, Any]


def _no_assignors(name: str) -> Any:
    raise LookupError(f"no assignor lookup was given to this member (asked for {name!r})")


class ConsumerMember(MemberEnd):
    """One worker's consumer-protocol membership; its driver sets ``closing`` (and may set
    ``rebalance_requested``, which this protocol has no use for: the coordinator moves tasks)."""

    def __init__(
        self, config: WorkerConfig, *, monotonic: Callable[[], float],
        on_change: Callable[[WorkerState, WorkerState], None] | None = None,
        on_tasks: Callable[[], None] | None = None, where: Callable[[], str] = lambda: "",
        rng: random.Random | None = None, assignor_lookup: AssignorLookup = _no_assignors,
        load_reports: bool = False,
    ) -> None:
        self.config = config
        self._load_reports = load_reports
        self._now = monotonic
        self._where = where
        self._rng = rng
        self.machine = WorkerMachine(name=config.client_id, on_change=on_change)
        self.session = ConsumerSession(config, monotonic)
        self.pending: list[Notice] = []
        self.tasks = Ownership(self.pending.append, name=config.client_id, on_set=on_tasks)
        self.closing = False
        self.rebalance_requested = False
        self.leave_on_close = not config.instance_id
        self.fatal_error: BaseException | None = None
        self.shut_down = False
        self._may_leave = True  # False once a fatal row says our place is not ours to leave
        self._fresh = True  # the next answer is the first since a join: tell the listener even if empty
        self._told = False  # news came that the next heartbeat answers (heard while joining too: sent at once)
        self.leading = LeaderJobs(assignor_lookup, config.group_id, name=config.client_id)  # ``client:<name>``

    # ------------------------------------------------------------------ the loop and its end (``worker.member_end``)

    def _stopped_by(self, rule: ErrorRule) -> None:
        self._may_leave = rule.leaves

    def give_up_unanswered(self) -> list[Notice]:
        """The classic core's hook for a held JoinGroup; a GroupHeartbeat is never held (nothing to give up)."""
        return []

    # ------------------------------------------------------------------ join

    def hear(self, nudge: Nudge) -> bool:
        """News from the coordinator's stream (any thread). True when the driver should cut the heartbeat
        wait short. In this protocol every piece of news (an assignment changed, tasks to give up, a
        moved coordinator, a reconnected stream) is answered by the next GroupHeartbeat, so a Stable
        member sends it now; a joining one has its call in flight. The rules are the same without it."""
        del nudge  # every kind asks for the same: the next heartbeat, now
        self._told = True  # news read before the join's answer was taken is not lost: the first tick sends it
        return self.machine.state is WorkerState.STABLE

    def _join_with_retry(self) -> Gen:
        """Epoch-0 attempts until one is answered: at once or after the backoff as the error's row says,
        never on a fatal row (raised)."""
        attempt = 0
        while not self.closing:
            attempt += 1
            self.machine.fire("join")
            sent = self._now()
            try:
                response = yield Call("group_heartbeat", join_request(self.config, self.session.joining_id()),
                                      self.session.call_timeout(running=False))
            except WorkerClosedError:
                raise
            except Exception as error:
                self.machine.fire("fail")
                if not retried(error):
                    self.session.forget()  # refused, so not taken (Kafka's fatal state is out of the group)
                    raise
                wait = wait_s(self.config, error, attempt, self._rng)
                log.warning("%s: join: %s; retrying in %.2fs (attempt %d, coordinator %s)", self.config.client_id,
                            error, wait, attempt, self._where())
                yield Sleep(wait)
                continue
            self.machine.fire("joined")
            self.machine.fire("synced")  # no barrier to wait at: the member is in, its tasks come as they free
            self._fresh = True
            log.info("%s: joined group %s as %s (epoch %d, consumer protocol)", self.config.client_id,
                     self.config.group_id, response.member_id, response.member_epoch)
            yield Joined(response.member_id, response.member_epoch, False)
            yield from self._answered(response, sent, frozenset())
            return

    # ------------------------------------------------------------------ stable

    def _stable_tick(self) -> Gen:
        """One heartbeat: at the interval, or at once when the coordinator has not heard what runs now."""
        session = self.session
        running = bool(self.tasks.assigned)
        target_done = self.leading.ready() is not None
        yield from self._start_job()
        # an ack (what runs now, as soon as listeners returned: Kafka's heartbeat after revocation), a target
        # to send, or news the heartbeat wait missed
        due = session.heard != frozenset(self.tasks.assigned) or target_done or self._told
        if not (due and not session.failures):
            yield Sleep(session.next_beat_s(running), heartbeat=True)  # a finished target job ends it
            if self.closing:
                return
        if self.rebalance_requested:
            self.rebalance_requested = False
            log.info("%s: request_rebalance() does nothing in the consumer protocol: the coordinator moves "
                     "tasks as members come and go", self.config.client_id)
        if session.session_over(bool(self.tasks.assigned)):
            log.warning("%s: no answer from the coordinator for %.1fs (session %.1fs, rebalance timeout %.1fs): "
                        "tasks lost, joining again", self.config.client_id, self._now() - session.last_ok,
                        session.session_s, self.config.rebalance_timeout_ms / 1000)
            yield from self._start_over()
            return
        owned = frozenset(self.tasks.assigned)
        told = None if session.heard == owned else owned
        self._told = False  # what the news asked for: this heartbeat
        target = self.leading.ready()  # (a stale result is dropped here, and the newest request's run starts)
        yield from self._start_job()
        request = beat_request(self.config, session.member_id, session.epoch, told)
        sent = self._now()
        if target is not None:
            request.target.CopyFrom(target)
        try:
            response = yield Call("group_heartbeat", request, session.call_timeout(bool(owned)))
        except errors.ResetNeeded as error:  # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
            log.warning("%s: %s: tasks lost, joining again with epoch 0", self.config.client_id, error)
            yield from self._start_over()
            return
        except errors.GroupCoordError as error:
            rule = rule_for(error)
            if rule is not None and rule.fatal:
                raise
            session.failed()
            log.warning("%s: heartbeat: %s; tasks run on for %.1fs unless the coordinator answers (coordinator %s)",
                        self.config.client_id, error, max(0.0, session.tasks_left()), self._where())
            return
        if target is not None:
            self.leading.heard(target)
        yield from self._answered(response, sent, told)
        if self.machine.state is WorkerState.STABLE:  # (not after a hung listener made it leave)
            yield from self._report_load(session.member_id, session.epoch, session.call_timeout(bool(self.tasks.assigned)))

    def _answered(self, response: pb.GroupHeartbeatResponse, sent: float, told: frozenset[Any] | None) -> Gen:
        """Take the answer's epoch and interval; apply its assignment, when it has one."""
        self.session.answered(response, sent, told)
        if response.HasField("compute_target"):  # this member leads a ``client:<name>`` group's target
            self.leading.asked(response.compute_target)
            yield from self._start_job()
        fresh, self._fresh = self._fresh, False
        if not response.HasField("assignment") and not fresh:
            return
        tasks = replicas_from_pb(sorted(response.assignment.tasks, key=lambda t: (t.task_id, t.replica)))
        if set(tasks) == set(self.tasks.assigned) and not fresh:
            return  # the same set again (after a lost answer, or what we said we run differed): nothing to tell
        self.tasks.apply(tasks, self.session.epoch, cooperative=True)  # on_revoked first, then on_assigned
        if not (yield from self._flush()):
            return  # a listener hung: the member left (``_leave_after_hang``) and joins again

    def _start_job(self) -> Gen:
        """Hand the driver the leader's next assignor run, if one waits and none runs (off the heartbeats)."""
        job = self.leading.next_job()
        if job is not None:
            self.leading.started((yield Offload(job)))

    def _start_over(self) -> Gen:
        """Lose everything (it may be someone else's now), then join again with epoch 0."""
        self.leading.drop()
        self.tasks.lose_all()
        yield from self._flush()
        self.session.rejoin()
        if self.machine.state is WorkerState.STABLE:
            self.machine.fire("rejoin")

    # ------------------------------------------------------------------ listeners and leave

    def _leave_after_hang(self) -> Gen:
        """Leave now (static members too), so the tasks move without waiting for our session."""
        session = self.session
        if session.member_id and session.epoch > 0:
            log.error("%s: leaving the group: a listener hung past the rebalance timeout", self.config.client_id)
            yield Call("group_leave", leave_request(self.config, session.member_id, LEAVE_EPOCH),
                       session.leave_timeout())
        self.tasks.lose_all()
        self.leading.drop()
        session.forget()
        if self.machine.state is WorkerState.STABLE:
            self.machine.fire("rejoin")

    def _leave(self) -> Gen:
        """-1 (dynamic, or asked to leave), -2 (a static member going for a while), or nothing (not joined,
        a dynamic member asked to stay, or a fatal row that forbids it)."""
        session = self.session
        if not session.member_id or not self._may_leave:
            return  # from its first join on (epoch 0, even unanswered) the coordinator may hold our member id
        if self.leave_on_close:
            epoch = LEAVE_EPOCH
        elif self.config.instance_id:
            epoch = STATIC_LEAVE_EPOCH
        else:
            return
        if (yield Call("group_leave", leave_request(self.config, session.member_id, epoch), session.leave_timeout())):
            log.info("%s: %s group %s", self.config.client_id,
                     "left" if epoch == LEAVE_EPOCH else f"static member {self.config.instance_id} away from",
                     self.config.group_id)
        else:  # best effort, as Kafka's: the coordinator ends our place when our session does
            log.warning("%s: the leave was not taken; if the coordinator holds our place (and instance id %r), it "
                        "keeps it until our session ends", self.config.client_id, self.config.instance_id)
        self.leading.drop()
        session.forget()
