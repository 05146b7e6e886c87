"""The leader's duties: run the assignor once per generation, and re-check on new load.

Whatever the assignor does — return an assignment, or raise any exception — the
leader's SyncGroup goes out: a failure travels as ``assignor_error`` ("Type:
message"), which the coordinator answers with INVALID_ASSIGNMENT and keeps as the
group's ``last_error`` (``groupcoord groups describe`` shows it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from groupcoord.assignors.base import Assignor, AssignorError, RebalanceCheck
from groupcoord.assignors.cooperative import cooperative_step
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import context_from_describe, context_from_join, sync_request_from_assignment
from groupcoord.worker.config import WorkerConfig

__all__ = ["AssignorLookup", "Recheck", "leader_sync_request", "rebalance_check", "sync_request"]

log = logging.getLogger("groupcoord.worker")

AssignorLookup = Callable[[str], Assignor]


def leader_sync_request(
    lookup: AssignorLookup, group_id: str, member_id: str, join: pb.JoinGroupResponse, *, name: str = "worker"
) -> pb.SyncGroupRequest:
    """The leader's SyncGroup for ``join``: the assignment, or the assignor's failure. In a
    cooperative generation any assignor's answer becomes its first step (``cooperative_step``)."""
    try:
        assignor = lookup(join.protocol)
        context = context_from_join(group_id, join)
        assignment = cooperative_step(context, assignor.assign(context))
        return sync_request_from_assignment(group_id, member_id, join.generation, assignment)
    except Exception as failure:  # any plug-in bug: report it to the coordinator, never kill the loop
        if isinstance(failure, (AssignorError, LookupError)):
            log.error("%s: assignor %s failed: %s", name, join.protocol, failure)
        else:
            log.exception("%s: assignor %s raised", name, join.protocol)
        return pb.SyncGroupRequest(
            group_id=group_id, member_id=member_id, generation=join.generation,
            assignor_error=f"{type(failure).__name__}: {failure}",
        )


def sync_request(lookup: AssignorLookup, config: WorkerConfig, member_id: str, is_leader: bool,
                 join: pb.JoinGroupResponse) -> pb.SyncGroupRequest:
    """A member's SyncGroup after ``join``: the leader runs the assignor, unless told to skip it (KIP-814:
    a static leader back in a Stable group gets the group's assignment as it is); everyone else asks."""
    if is_leader and not join.skip_assignment:
        request = leader_sync_request(lookup, config.group_id, member_id, join, name=config.client_id)
    else:
        request = pb.SyncGroupRequest(group_id=config.group_id, member_id=member_id, generation=join.generation)
    request.instance_id = config.instance_id
    request.protocol_type = join.protocol_type  # KIP-559: the coordinator checks we agree
    request.protocol_name = join.protocol
    return request


def rebalance_check(lookup: AssignorLookup, protocol: str) -> RebalanceCheck | None:
    """The group's assignor if it has the ``RebalanceCheck`` hook switched on, else None."""
    try:
        assignor = lookup(protocol)
    except LookupError:
        return None
    if isinstance(assignor, RebalanceCheck) and assignor.recheck_interval_s:
        return assignor
    return None


class Recheck:
    """Leader only: an assignor with the ``RebalanceCheck`` hook (the Pulsar shedders) is asked one
    interval after the generation began and then every interval, on the newest load snapshot,
    whether it would move something now (``due``, then ``judge``). A failed check is logged and skipped."""

    def __init__(self, lookup: AssignorLookup, monotonic: Callable[[], float], *, name: str = "worker") -> None:
        self._lookup = lookup
        self._monotonic = monotonic
        self._name = name
        self._next: float | None = None

    def reset(self) -> None:
        """A new generation: start counting again."""
        self._next = None

    def due(self, protocol: str) -> RebalanceCheck | None:
        """The assignor to ask, when a re-check is due now (then the member core fetches the group with its
        load snapshot and hands it to ``judge``)."""
        check = rebalance_check(self._lookup, protocol)
        if check is None or not self._due(float(check.recheck_interval_s)):
            return None
        return check

    def judge(self, check: RebalanceCheck, protocol: str, generation: int,
              described: pb.DescribeGroupResponse) -> bool:
        """Ask ``check`` about the group as ``described``; a failed check is logged and says no."""
        try:
            if described.generation == generation and check.needs_rebalance(context_from_describe(described)):
                log.info("%s: assignor %s would move tasks on the newest load snapshot: rebalancing",
                         self._name, protocol)
                return True
        except Exception:
            log.exception("%s: assignor %s re-check failed", self._name, protocol)
        return False

    def _due(self, interval_s: float) -> bool:
        now = self._monotonic()
        if self._next is None:
            self._next = now + interval_s
            return False
        if now < self._next:
            return False
        self._next = now + interval_s
        return True
