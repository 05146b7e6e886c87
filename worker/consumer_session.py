"""A consumer-protocol member's membership and clock, and the GroupHeartbeat requests it sends, with no I/O.

The consumer protocol (docs/protocol2.md) has one RPC for everything: epoch 0 joins, -1 leaves,
-2 is a static member leaving for a while, any other epoch is the one of the last answer. Fields
other than the ids and the epoch are sent only when they changed, as Kafka's
``HeartbeatRequestState`` does: the member's metadata, assignor and timeouts on a join, what it runs
(``owned``) when that changed since the coordinator last heard it (and again after a heartbeat that
failed: the coordinator may not have heard the last one).

The coordinator sets the cadence (every answer carries ``heartbeat_interval_ms``); the member keeps
the session rule of the classic client: the coordinator restarts our session when it answers, so
once a session (less a margin, ``worker.give_up``) has passed since we sent the last call it
answered, what we run may be someone else's: stop it all and join again with epoch 0.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable

from groupcoord.assignors.base import TaskReplica
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.give_up import give_up_margin

__all__ = ["JOIN_EPOCH", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "ConsumerSession", "beat_request", "join_request",
           "leave_request"]

log = logging.getLogger("groupcoord.worker")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
Owned = frozenset[TaskReplica]


class ConsumerSession:
    """Who the coordinator says we are (member id, epoch), what it last heard we run, and the deadlines.

    Read by the clients' views as the classic ``Membership`` is: ``generation`` is the member epoch,
    a consumer member is never a leader, ``protocol`` is the server-side assignor."""

    leader_id = ""
    is_leader = False
    rebalance_protocol = "consumer"

    def __init__(self, config: WorkerConfig, monotonic: Callable[[], float]) -> None:
        self.config = config
        self._now = monotonic
        self.member_id = ""
        self.epoch = JOIN_EPOCH
        self.protocol = config.server_assignor
        self.interval_s = config.heartbeat_interval_ms / 1000  # until the coordinator says
        self.last_ok = monotonic()
        self.failures = 0  # heartbeats in a row that got no answer (an outage, a coordinator moving)
        self.heard: Owned | None = frozenset()  # what the coordinator last heard we run; None: tell it again

    @property
    def generation(self) -> int:
        return self.epoch

    @property
    def session_s(self) -> float:
        return self.config.session_timeout_ms / 1000

    @property
    def hold_s(self) -> float:
        """How long our tasks are ours unheard: the session, or the rebalance timeout when shorter (the
        coordinator hands on tasks it asked us to give up once that passes, and it may have asked in an
        answer we never got). 0 (the coordinator's default) adds no bound."""
        rebalance_s = self.config.rebalance_timeout_ms / 1000
        return min(self.session_s, rebalance_s) if rebalance_s > 0 else self.session_s

    # ------------------------------------------------------------------ answers

    def answered(self, response: pb.GroupHeartbeatResponse, sent: float, owned_sent: Owned | None) -> None:
        """A GroupHeartbeat sent at ``sent`` was answered: the coordinator restarted our session after it.
        The interval is the coordinator's, never more than half our session (two chances per session)."""
        self.last_ok = sent
        self.failures = 0
        self.member_id = response.member_id or self.member_id
        self.epoch = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self.interval_s = min(response.heartbeat_interval_ms / 1000, self.hold_s / 2)
        if owned_sent is not None:
            self.heard = owned_sent

    def failed(self) -> None:
        """A heartbeat got no answer: retry sooner, and tell the coordinator what we run again."""
        self.failures += 1
        self.heard = None

    def rejoin(self) -> None:
        """Fenced, forgotten, or the session ran out: join again with epoch 0 (the member id is kept, as
        Kafka's consumer keeps it; the coordinator takes a join that brings its own id)."""
        self.epoch = JOIN_EPOCH
        self.heard = frozenset()
        self.failures = 0

    def forget(self) -> None:
        """Left the group: the next join is a new member's."""
        self.rejoin()
        self.member_id = ""

    def joining_id(self) -> str:
        """The member id a join goes out under: ours from the first join on (made here, as Kafka's consumer
        makes its own since KIP-1082), so a join whose answer was lost is retried, and left, under the id the
        coordinator may already hold us by; a static member's instance id is held from that join on."""
        if not self.member_id:
            self.member_id = f"{self.config.instance_id or self.config.client_id or 'member'}-{uuid.uuid4()}"
        return self.member_id

    # ------------------------------------------------------------------ the clock

    def session_left(self) -> float:
        """Seconds until a session has passed since the coordinator last answered us."""
        return self.session_s - (self._now() - self.last_ok)

    def tasks_left(self) -> float:
        """Seconds our tasks may still run unheard: ``hold_s`` since the coordinator last answered us, less
        the margin for our own late wake-up (``worker.give_up.give_up_margin``, with the interval at most a
        fifth of ``hold_s``). The coordinator's deadlines (session, revocation) start at a request it
        answered, so they end after this one."""
        hold_s = self.hold_s
        margin = give_up_margin(session_timeout_s=hold_s, heartbeat_interval_s=min(self.interval_s, hold_s / 5))
        return hold_s - (self._now() - self.last_ok) - margin

    def session_over(self, running: bool) -> bool:
        """True when what runs must be given up now: the coordinator may have removed us."""
        return running and self.tasks_left() <= 0

    def next_beat_s(self, running: bool) -> float:
        """The wait before the next heartbeat: the interval; after unanswered ones, the retry backoff
        (doubling, at most the interval); never past the moment running tasks must be given up."""
        wait = self.interval_s
        if self.failures:
            backoff: float = self.config.retry_backoff_ms / 1000 * 2.0 ** min(self.failures - 1, 16)
            wait = min(wait, backoff)
        if running:
            wait = min(wait, max(0.0, self.tasks_left()))
        return wait

    def call_timeout(self, running: bool) -> float:
        """Deadline of one GroupHeartbeat: the request timeout, at most half the session, and while tasks
        run never past the moment they must be given up (the next tick then gives them up)."""
        cap = min(self.config.request_timeout_ms / 1000, self.hold_s / 2)
        if running:
            cap = min(cap, self.tasks_left())
        return max(0.1, cap)

    def leave_timeout(self) -> float:
        return min(5.0, self.config.request_timeout_ms / 1000)


# ---------------------------------------------------------------------- requests


def join_request(config: WorkerConfig, member_id: str) -> pb.GroupHeartbeatRequest:
    """Epoch 0: everything the coordinator keeps of us (it owns nothing: no ``owned``)."""
    request = pb.GroupHeartbeatRequest(
        group_id=config.group_id, member_id=member_id, member_epoch=JOIN_EPOCH, client_id=config.client_id,
        session_timeout_ms=config.session_timeout_ms, rebalance_timeout_ms=config.rebalance_timeout_ms,
        metadata=pb.MemberMetadata(rack=config.rack, pool=config.pool, capacity=config.capacity,
                                   attributes=dict(config.attributes)))
    if config.instance_id:
        request.instance_id = config.instance_id
    if config.server_assignor:
        request.assignor = config.server_assignor
    return request


def beat_request(config: WorkerConfig, member_id: str, epoch: int, owned: Iterable[TaskReplica] | None
                 ) -> pb.GroupHeartbeatRequest:
    """A heartbeat: the ids and the epoch; ``owned`` only when it changed (None: unchanged)."""
    request = pb.GroupHeartbeatRequest(group_id=config.group_id, member_id=member_id, member_epoch=epoch)
    if owned is not None:
        request.owned.SetInParent()  # present and empty: runs nothing
        request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in sorted(owned))
    return request


def leave_request(config: WorkerConfig, member_id: str, epoch: int) -> pb.GroupHeartbeatRequest:
    """-1 leaves (the tasks move at once); -2 a static member leaving for a while (they wait for it)."""
    request = pb.GroupHeartbeatRequest(group_id=config.group_id, member_id=member_id, member_epoch=epoch)
    if config.instance_id:
        request.instance_id = config.instance_id
    return request
