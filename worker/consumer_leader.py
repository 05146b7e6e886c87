"""The worker's half of the consumer protocol's leader-side assignor (``client:<name>``), with no I/O.

A group whose members name the assignor ``client:<name>`` has its target computed by one of them, the
leader (the coordinator's half: ``coordinator.model.leader_assignor``). The coordinator puts a
``TargetRequest`` in the leader's heartbeat answer (``compute_target``); the leader runs its own
assignor ``<name>`` (the worker's lookup: built-ins, ``register``-ed ones, entry points, as on the
classic leader) and answers in a later heartbeat's ``target``, listing only the members whose target
changed, and the tasks its assignor split (``splits``: the coordinator applies them to the catalog). The coordinator gives it three heartbeat intervals, then falls back to its own assignor.

The assignor runs off the heartbeat's path: the member core hands ``LeaderJobs.next_job()`` to its driver
(``effects.Offload``: a thread of the driver's), and its heartbeats go on meanwhile; the answer rides the
first heartbeat after the job is done. At most one job runs; a request that arrives meanwhile waits for it
and supersedes any other waiting one, and a result for an epoch older than the newest request, or from
before the member lost its place (fenced, left, joined again: ``drop``), is never sent.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import member_from_pb, replicas_to_pb, snapshot_from_pb, task_pb, task_spec
from groupcoord.worker.effects import Running
from groupcoord.worker.leader import AssignorLookup

__all__ = ["CLIENT_PREFIX", "LeaderJobs", "changed_targets", "context_from_request", "target_answer"]

log = logging.getLogger("groupcoord.worker")

CLIENT_PREFIX = "client:"
"""An assignor name that starts with this runs on the group's leader worker, not on the coordinator."""


def context_from_request(group_id: str, request: pb.TargetRequest) -> AssignmentContext:
    """What the assignor reads, as on the classic leader: each member's ``owned`` is its current target
    (``assigned``), the catalog, the newest load snapshot; the random source is seeded by the epoch."""
    snapshot = snapshot_from_pb(request.load_snapshot) if request.HasField("load_snapshot") else None
    return AssignmentContext(
        group_id=group_id, generation=request.group_epoch,
        members=tuple(member_from_pb(m, generation=request.group_epoch) for m in request.members),
        tasks=tuple(task_spec(t) for t in request.tasks), load_snapshot=snapshot,
        rng=random.Random(request.group_epoch))


def changed_targets(request: pb.TargetRequest, assignment: Assignment) -> list[pb.MemberAssignment]:
    """The members of the request whose target the assignment changes (one left out gets none); members
    the request does not name are not the group's and are not sent."""
    changed = []
    for member in request.members:
        tasks = sorted(assignment.members.get(member.member_id, ()))
        if frozenset(tasks) != {(t.task_id, t.replica) for t in member.assigned} or len(set(tasks)) != len(tasks):
            changed.append(pb.MemberAssignment(member_id=member.member_id, tasks=replicas_to_pb(tasks)))
    return changed


def target_answer(lookup: AssignorLookup, group_id: str, request: pb.TargetRequest, *,
                  name: str = "worker") -> pb.TargetAnswer | None:
    """Run the assignor the request names (off the heartbeat's path). None when this worker has no such
    assignor: it answers nothing and the coordinator falls back on its own after three intervals; an
    assignor that raises answers ``error``, which the coordinator falls back on at once."""
    epoch, assignor_name = request.group_epoch, request.assignor
    try:
        assignor = lookup(assignor_name)
    except LookupError:
        log.error("%s: cannot compute group %s's target for epoch %d: no assignor %r in this worker (register it, "
                  "or install its entry point); the coordinator falls back", name, group_id, epoch, assignor_name)
        return None
    try:
        assignment = assignor.assign(context_from_request(group_id, request))
        splits = [pb.TaskSplit(parent_task_id=s.parent_task_id, children=[task_pb(c) for c in s.children])
                  for s in assignment.splits]  # the coordinator applies them to the catalog with the target
        return pb.TargetAnswer(group_epoch=epoch, assignments=changed_targets(request, assignment), splits=splits)
    except Exception as failure:  # any plug-in bug: report it to the coordinator, never kill the worker
        if isinstance(failure, AssignorError):
            log.error("%s: assignor %s failed for epoch %d: %s", name, assignor_name, epoch, failure)
        else:
            log.exception("%s: assignor %s raised for epoch %d", name, assignor_name, epoch)
        return pb.TargetAnswer(group_epoch=epoch, error=f"{type(failure).__name__}: {failure}")


class LeaderJobs:
    """The requests this member was asked, the one job running, and the answer waiting for a heartbeat."""

    def __init__(self, lookup: AssignorLookup, group_id: str, *, name: str = "worker") -> None:
        self._lookup = lookup
        self._group_id = group_id
        self._name = name
        self._newest = -1  # the newest epoch asked since the member last lost its place
        self._waiting: pb.TargetRequest | None = None
        self._running: tuple[int, Running] | None = None  # its epoch, and the driver's handle
        self._answer: pb.TargetAnswer | None = None

    @property
    def busy(self) -> bool:
        """A job runs, waits, or has an answer not yet heard by the coordinator."""
        return self._running is not None or self._waiting is not None or self._answer is not None

    def asked(self, request: pb.TargetRequest) -> None:
        """A heartbeat answer carried ``compute_target``: it replaces any request still waiting."""
        log.info("%s: leader of group %s: computing the target of epoch %d with %s (%d members, %d tasks)",
                 self._name, self._group_id, request.group_epoch, request.assignor, len(request.members),
                 len(request.tasks))
        self._newest = max(self._newest, request.group_epoch)
        self._waiting = request
        if self._answer is not None and self._answer.group_epoch < request.group_epoch:
            self._answer = None  # the coordinator asks for a newer epoch: it would ignore this one

    def next_job(self) -> Callable[[], pb.TargetAnswer | None] | None:
        """The job to hand the driver now (then ``started``), or None: nothing waits, or one runs."""
        request = self._waiting
        if request is None or self._running is not None:
            return None
        lookup, group_id, name = self._lookup, self._group_id, self._name
        return lambda: target_answer(lookup, group_id, request, name=name)

    def started(self, running: Running) -> None:
        assert self._waiting is not None
        self._running, self._waiting = (self._waiting.group_epoch, running), None

    def ready(self) -> pb.TargetAnswer | None:
        """The answer to send with the next heartbeat, once its job is done (a stale one is dropped)."""
        if self._running is not None and self._running[1].done():
            epoch, running = self._running
            self._running = None
            result = self._result_of(running)
            if epoch < self._newest:
                log.info("%s: the target of epoch %d is dropped: epoch %d was asked for since", self._name, epoch,
                         self._newest)
            elif result is not None:
                self._answer = result
        return self._answer

    def heard(self, answer: pb.TargetAnswer) -> None:
        """A heartbeat carrying ``answer`` was answered: the coordinator has it."""
        if self._answer is answer:
            self._answer = None

    def drop(self) -> None:
        """The member lost its place (fenced, left, joining again): nothing asked before is answered; a job
        still running finishes in the driver's thread and its result is never sent."""
        if self.busy:
            log.info("%s: target computation dropped: the member joins the group again", self._name)
        self._newest = -1
        self._waiting = self._answer = None
        self._running = None  # never polled again

    def _result_of(self, running: Running) -> pb.TargetAnswer | None:
        try:
            result: Any = running.result()
        except Exception:  # the driver's thread itself failed (or was cancelled at close)
            log.exception("%s: the target computation did not finish", self._name)
            return None
        return result if isinstance(result, pb.TargetAnswer) else None
