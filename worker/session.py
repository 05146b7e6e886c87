"""A worker's membership and the decisions both clients take on it, with no I/O.

``WorkerClient`` (a thread) and ``AsyncWorkerClient`` (a task on the service's loop) each keep
one ``Membership``: who the coordinator says we are (member id, generation, leader, assignor,
rebalance protocol), when it last confirmed it, and the deadlines that follow. They feed it what
came back (a JoinGroup answer, a failure, a heartbeat) and carry out what it returns; the error
rules themselves are the table of ``worker.rules``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from groupcoord import errors
from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.give_up import give_up_at, give_up_margin
from groupcoord.worker.rules import ErrorRule, StableAction, rule_for

__all__ = ["HeartbeatVerdict", "Membership"]

log = logging.getLogger("groupcoord.worker")


@dataclass(frozen=True)
class HeartbeatVerdict:
    """What a failed heartbeat in Stable leads to: ``action`` and whether the tasks are lost first."""

    action: StableAction
    lose_tasks: bool = False
    rule: ErrorRule | None = None


class Membership:
    """Member id, generation and the session's clock of one worker (one owner: its client's loop)."""

    def __init__(self, config: WorkerConfig, monotonic: Callable[[], float]) -> None:
        self.config = config
        self._monotonic = monotonic
        self.member_id = ""
        self.generation = -1
        self.leader_id = ""
        self.protocol = ""
        # the rebalance protocol of the last generation (before the first: what we offer)
        self.rebalance_protocol = RebalanceProtocol.of(config.rebalance_protocol)
        self.last_heartbeat_ok = monotonic()
        self.heartbeats_failed = 0  # heartbeats in a row the coordinator did not answer (outage)
        self.rejoin_after_sync = False

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    def cooperative(self) -> bool:
        return self.rebalance_protocol == RebalanceProtocol.COOPERATIVE

    # ------------------------------------------------------------------ join / sync

    def joined(self, response: pb.JoinGroupResponse, sent: float | None = None) -> None:
        """A JoinGroup (sent at ``sent``) was answered: this is who we are in the new generation, and
        the coordinator restarted our session when it answered."""
        if sent is not None:
            self.last_heartbeat_ok = sent
        self.member_id = response.member_id
        self.generation = response.generation
        self.leader_id = response.leader_id
        self.protocol = response.protocol
        self.rebalance_protocol = RebalanceProtocol.of(response.rebalance_protocol)
        log.info(
            "%s: joined generation %d as %s (leader %s, assignor %s)",
            self.config.client_id, response.generation,
            "leader" if self.is_leader else "follower", response.leader_id, response.protocol,
        )

    def synced(self, response: pb.SyncGroupResponse) -> None:
        self.rejoin_after_sync = response.rejoin

    def assigned(self) -> None:
        """The generation's assignment arrived: the coordinator has just confirmed the membership."""
        self.last_heartbeat_ok = self._monotonic()

    def join_failed(self, failure: BaseException) -> tuple[ErrorRule | None, bool]:
        """A join/sync attempt failed: apply the row's resets. Returns the row and whether the
        tasks are lost now (cooperative: after a reset they may be someone else's)."""
        rule = rule_for(failure)
        lose = False
        if rule is not None and rule.reset_member:
            lose = self.reset(failure)
        elif rule is not None and rule.forget_generation:
            lose = self.forget_generation(failure)
        elif isinstance(failure, errors.MemberIdRequiredError) and failure.member_id:
            self.member_id = failure.member_id  # asked twice in a row: join with the newest id
        return rule, lose

    def reset(self, why: BaseException) -> bool:
        """The coordinator forgot us (or our generation). True when the tasks are lost (cooperative)."""
        log.info("%s: %s: resetting member id and generation", self.config.client_id, why)
        self.member_id = ""
        self.generation = -1
        return self.cooperative()

    def forget_generation(self, why: BaseException) -> bool:
        """Our generation is stale but our member id may still be valid: join again under it (as
        Kafka's client does). True when the tasks are lost (cooperative: they may be reassigned)."""
        log.info("%s: %s: resetting the generation, keeping member id %s", self.config.client_id, why,
                 self.member_id)
        self.generation = -1
        return self.cooperative()

    # ------------------------------------------------------------------ stable

    def heartbeat_ok(self, sent: float) -> None:
        """A heartbeat sent at ``sent`` was answered (the coordinator restarted our session after it)."""
        self.last_heartbeat_ok = sent
        self.heartbeats_failed = 0

    def heartbeat_failed(self, failure: errors.GroupCoordError, sent: float | None = None) -> HeartbeatVerdict:
        """What the row says for a heartbeat that failed, with the session's clock applied to ``keep``.
        One answered REBALANCE_IN_PROGRESS (sent at ``sent``) restarted our session all the same."""
        if sent is not None and isinstance(failure, errors.RebalanceInProgressError):
            self.last_heartbeat_ok = sent
        rule = rule_for(failure)
        assert rule is not None  # a GroupCoordError always has a row (the root's)
        if rule.stable is StableAction.KEEP:
            self.heartbeats_failed += 1
            silent_for = self._monotonic() - self.last_heartbeat_ok
            if silent_for * 1000 < self.config.session_timeout_ms:
                log.warning("%s: %s; keeping tasks, next heartbeat elsewhere", self.config.client_id, failure)
                return HeartbeatVerdict(StableAction.KEEP, rule=rule)
            log.warning("%s: no heartbeat for %.1fs (> session timeout): re-joining", self.config.client_id,
                        silent_for)
            # the coordinator may have given them away meanwhile
            return HeartbeatVerdict(StableAction.REJOIN, lose_tasks=self.cooperative(), rule=rule)
        if rule.stable is StableAction.STOP:
            return HeartbeatVerdict(StableAction.STOP, rule=rule)
        log.info("%s: heartbeat: %s; re-joining", self.config.client_id, failure)
        lose = (self.reset(failure) if rule.reset_member
                else self.forget_generation(failure) if rule.forget_generation else False)
        return HeartbeatVerdict(StableAction.REJOIN, lose_tasks=lose, rule=rule)

    # ------------------------------------------------------------------ the clock

    def session_left(self) -> float:
        """Seconds until a session has passed since the coordinator last confirmed us."""
        return self.config.session_timeout_ms / 1000 - (self._monotonic() - self.last_heartbeat_ok)

    def phase_timeout(self) -> float:
        """Deadline (s) of JoinGroup / SyncGroup: the coordinator holds them up to the rebalance timeout."""
        return (self.config.rebalance_timeout_ms + self.config.request_timeout_ms) / 1000

    def give_up_in(self, sent: float, running_tasks: bool) -> float | None:
        """While a JoinGroup or SyncGroup sent at ``sent`` is unanswered, cooperative tasks run on only
        until a margin before the coordinator could have removed us (``worker.give_up``): the seconds
        from now until they must be lost, or None when nothing needs giving up (eager, or nothing runs)."""
        if not self.cooperative() or not running_tasks:
            return None
        cfg = self.config
        session_s = cfg.session_timeout_ms / 1000
        at = give_up_at(last_answer=self.last_heartbeat_ok, sent=sent, session_timeout_s=session_s,
                        rebalance_timeout_s=cfg.rebalance_timeout_ms / 1000)
        margin = give_up_margin(session_timeout_s=session_s, heartbeat_interval_s=cfg.heartbeat_interval_ms / 1000)
        return at - margin - self._monotonic()

    def next_heartbeat_s(self) -> float:
        """A heartbeat interval; after heartbeats the coordinator did not answer, sooner (the retry
        backoff, doubling, at most the interval), so a coordinator that comes back after a short
        outage hears from its members at once, before their sessions run out."""
        interval = self.config.heartbeat_interval_ms / 1000
        if not self.heartbeats_failed:
            return interval
        backoff: float = self.config.retry_backoff_ms / 1000 * 2.0 ** min(self.heartbeats_failed - 1, 16)
        return min(interval, backoff)

    def stable_timeout(self) -> float:
        """Deadline (s) of a call in Stable: half the session at most (a hung coordinator is left in
        time to reach the next one, as Kafka's consumer marks it unknown), never past the session's
        end, at least a heartbeat interval so a slow answer can arrive."""
        cfg = self.config
        session = cfg.session_timeout_ms / 1000
        return max(cfg.heartbeat_interval_ms / 1000, min(cfg.request_timeout_ms / 1000, session / 2,
                                                          self.session_left()))

    def backoff_split(self, seconds: float, running_tasks: bool) -> float | None:
        """Cooperative tasks run on through a re-join only while the membership can still be alive:
        once a session has passed since the coordinator last confirmed it, it may have removed us and
        given them away. Returns the part of a ``seconds`` backoff after which the tasks are lost
        (then sleep that, lose them, sleep the rest), or None when the backoff ends first."""
        left = self.tasks_left()
        if self.cooperative() and running_tasks and left < seconds:
            return max(0.0, left)
        return None

    def session_over(self, running_tasks: bool) -> bool:
        """True when cooperative tasks must be given up before the next attempt (see ``backoff_split``)."""
        return self.cooperative() and running_tasks and self.tasks_left() <= 0

    def tasks_left(self) -> float:
        """Seconds that cooperative tasks may still run through a re-join: the session left, less the
        margin the worker keeps for its own late wake-up (``worker.give_up.give_up_margin``)."""
        cfg = self.config
        margin = give_up_margin(session_timeout_s=cfg.session_timeout_ms / 1000,
                                heartbeat_interval_s=cfg.heartbeat_interval_ms / 1000)
        return self.session_left() - margin
