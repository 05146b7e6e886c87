"""The wire: every conversion between protobuf messages and the domain's plain types.

One module so that a message's shape is read and written in one place, and so that neither the
coordinator nor the worker has to import the other for it (the coordinator needs
:func:`report_from_pb` and :func:`snapshot_to_pb`; the worker the rest). The coordinator's
storage records (``coordinator.model.records``) keep their own encoding.

* tasks and replicas: :func:`task_spec` / :func:`task_pb`, :func:`replicas_from_pb` / :func:`replicas_to_pb`
* members: :func:`member_from_pb` / :func:`member_pb`
* the leader's input: :func:`context_from_join` (and its inverse :func:`join_response_from_context`),
  :func:`context_from_describe`
* the leader's answer: :func:`sync_request_from_assignment`
* load: :func:`report_to_pb` / :func:`report_from_pb`, :func:`snapshot_to_pb` / :func:`snapshot_from_pb`

The load messages list the figures of ``groupcoord.figures`` and the snapshot fields of
``assignors.snapshot``, so these functions loop over those names rather than spelling them out.

Layer: imports the stubs, ``groupcoord.figures``, ``assignors`` and ``loadstats`` (its light
modules: no pyarrow, no pyspark); never the coordinator, the worker or the command line.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

from groupcoord.assignors.base import (
    Assignment,
    AssignmentContext,
    MemberInfo,
    RebalanceProtocol,
    TaskReplica,
    TaskSpec,
)
from groupcoord.assignors.snapshot import (
    TASK_STATS_FIELDS,
    WORKER_STATS_FIELDS,
    LoadSnapshot,
    TaskLoadStats,
    WorkerLoadStats,
)
from groupcoord.figures import RESOURCES, TASK_FIGURES
from groupcoord.loadstats.samples import LoadReport, ResourceUsage, TaskLoad
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    # tasks, replicas, members
    "task_spec",
    "task_pb",
    "replicas_from_pb",
    "replicas_to_pb",
    "member_from_pb",
    "member_pb",
    # the leader's input and answer
    "context_from_join",
    "context_from_describe",
    "join_response_from_context",
    "sync_request_from_assignment",
    # load
    "report_to_pb",
    "report_from_pb",
    "snapshot_to_pb",
    "snapshot_from_pb",
]


# -- tasks, replicas, members ----------------------------------------------------------------


_NO_ATTRIBUTES: MappingProxyType[str, str] = MappingProxyType({})


def _attributes(attributes: Any) -> MappingProxyType[str, str]:
    """A read-only copy; the common empty map shared (a 100,000-task catalog has 100,000 of them)."""
    return MappingProxyType(dict(attributes)) if attributes else _NO_ATTRIBUTES


def task_spec(task: pb.Task) -> TaskSpec:
    """A catalog task; unset ``replicas`` and ``weight`` (0) mean the defaults (1)."""
    return TaskSpec(
        task_id=task.task_id,
        replicas=task.replicas or 1,
        pool=task.pool,
        weight=task.weight or 1.0,
        attributes=_attributes(task.attributes),
    )


def task_pb(spec: TaskSpec) -> pb.Task:
    return pb.Task(
        task_id=spec.task_id, replicas=spec.replicas, pool=spec.pool, weight=spec.weight,
        attributes=dict(spec.attributes),
    )


def replicas_from_pb(replicas: Iterable[pb.TaskReplica]) -> tuple[TaskReplica, ...]:
    return tuple(TaskReplica(r.task_id, r.replica) for r in replicas)


def replicas_to_pb(replicas: Iterable[TaskReplica]) -> list[pb.TaskReplica]:
    return [pb.TaskReplica(task_id=r.task_id, replica=r.replica) for r in replicas]


def member_from_pb(member: pb.GroupMember, *, generation: int | None = None) -> MemberInfo:
    """A member as the leader sees it; unset ``capacity`` (0) means the default (1). Given the
    ``generation`` of a JoinGroup answer, ``owned`` is what the coordinator counts the member as
    running (``assigned``, from the previous generation), never what the member claims: a member
    cannot steer an assignor (sticky, cooperative) by claiming tasks it was not given."""
    md = member.metadata
    if generation is not None:
        owned = replicas_from_pb(member.assigned)
        owned_generation = generation - 1 if owned else -1
    else:
        owned, owned_generation = replicas_from_pb(md.owned), md.owned_generation
    return MemberInfo(
        member_id=member.member_id,
        instance_id=member.instance_id,
        client_id=member.client_id,
        host=member.host,
        rack=md.rack,
        pool=md.pool,
        capacity=md.capacity or 1.0,
        attributes=_attributes(md.attributes),
        owned=owned,
        owned_generation=owned_generation,
    )


def member_pb(member: MemberInfo) -> pb.GroupMember:
    return pb.GroupMember(
        member_id=member.member_id,
        instance_id=member.instance_id,
        client_id=member.client_id,
        host=member.host,
        metadata=pb.MemberMetadata(
            rack=member.rack,
            pool=member.pool,
            capacity=member.capacity,
            attributes=dict(member.attributes),
            owned=replicas_to_pb(member.owned),
            owned_generation=member.owned_generation,
        ),
    )


# -- the leader's input and answer -----------------------------------------------------------


def context_from_join(group_id: str, response: pb.JoinGroupResponse, seed: int | None = None) -> AssignmentContext:
    """The leader's view of the group in this generation; the random source is seeded by the
    generation (unless given) so a re-run of the same generation decides the same way."""
    snapshot = snapshot_from_pb(response.load_snapshot) if response.HasField("load_snapshot") else None
    return AssignmentContext(
        group_id=group_id,
        generation=response.generation,
        members=tuple(member_from_pb(m, generation=response.generation) for m in response.members),
        tasks=tuple(task_spec(t) for t in response.tasks),
        load_snapshot=snapshot,
        rng=random.Random(response.generation if seed is None else seed),
        rebalance_protocol=RebalanceProtocol.of(response.rebalance_protocol),
    )


def join_response_from_context(context: AssignmentContext) -> pb.JoinGroupResponse:
    """What a leader receives for ``context`` (its inverse, but for the random source): a
    context written down to replay an assignor elsewhere, or built by a test."""
    cooperative = context.rebalance_protocol == RebalanceProtocol.COOPERATIVE
    response = pb.JoinGroupResponse(
        generation=context.generation,
        members=[member_pb(m) for m in context.members],
        tasks=[task_pb(t) for t in context.tasks],
        rebalance_protocol=context.rebalance_protocol if cooperative else "",  # empty on the wire means eager
    )
    for described, member in zip(response.members, context.members, strict=True):
        described.assigned.extend(replicas_to_pb(member.owned))
    if context.load_snapshot is not None:
        response.load_snapshot.CopyFrom(snapshot_to_pb(context.load_snapshot))
    return response


def context_from_describe(response: pb.DescribeGroupResponse) -> AssignmentContext:
    """The group as it runs now (owned = current assignment), for the leader's periodic re-check."""
    members = []
    for described in response.members:
        member = pb.GroupMember()
        member.CopyFrom(described.member)
        del member.metadata.owned[:]
        member.metadata.owned.extend(described.assigned)
        member.metadata.owned_generation = response.generation
        members.append(member_from_pb(member))
    snapshot = snapshot_from_pb(response.load_snapshot) if response.HasField("load_snapshot") else None
    return AssignmentContext(
        group_id=response.group_id,
        generation=response.generation,
        members=tuple(members),
        tasks=tuple(task_spec(t) for t in response.tasks),
        load_snapshot=snapshot,
        rng=random.Random(response.generation),
    )


def sync_request_from_assignment(
    group_id: str, member_id: str, generation: int, assignment: Assignment
) -> pb.SyncGroupRequest:
    """The leader's SyncGroup: members and unplaced replicas sorted, so equal assignments encode equally."""
    return pb.SyncGroupRequest(
        group_id=group_id,
        member_id=member_id,
        generation=generation,
        assignments=[
            pb.MemberAssignment(member_id=m, tasks=replicas_to_pb(replicas))
            for m, replicas in sorted(assignment.members.items())
        ],
        unassigned=[
            pb.UnassignedReplica(task=pb.TaskReplica(task_id=r.task_id, replica=r.replica), reason=reason)
            for r, reason in sorted(assignment.unassigned.items())
        ],
        splits=[
            pb.TaskSplit(parent_task_id=s.parent_task_id, children=[task_pb(c) for c in s.children])
            for s in assignment.splits
        ],
    )


# -- load ------------------------------------------------------------------------------------


def report_to_pb(report: LoadReport) -> pb.LoadReport:
    """A worker's load report for ReportLoad (every resource present, ``(0, 0)`` when unknown)."""
    message = pb.LoadReport(
        ts_ms=report.ts_ms,
        tasks=[pb.TaskLoadReport(task_id=t.task_id, **{f: getattr(t, f) for f in TASK_FIGURES}) for t in report.tasks],
    )
    for name, usage in report.resources().items():
        getattr(message, name).CopyFrom(pb.ResourceUsage(usage=usage.usage, limit=usage.limit))
    return message


def report_from_pb(report: pb.LoadReport) -> LoadReport:
    """A received load report as the sample log takes it."""
    resources = {r: ResourceUsage(getattr(report, r).usage, getattr(report, r).limit) for r in RESOURCES}
    return LoadReport(
        ts_ms=report.ts_ms,
        tasks=tuple(TaskLoad(task_id=t.task_id, **{f: getattr(t, f) for f in TASK_FIGURES}) for t in report.tasks),
        **resources,
    )


def snapshot_from_pb(snapshot: pb.LoadSnapshot) -> LoadSnapshot:
    return LoadSnapshot(
        group_id=snapshot.group_id,
        snapshot_id=snapshot.snapshot_id,
        created_ms=snapshot.created_ms,
        tasks=MappingProxyType(
            {t.task_id: TaskLoadStats(**{f: getattr(t, f) for f in TASK_STATS_FIELDS}) for t in snapshot.tasks}
        ),
        workers=MappingProxyType(
            {w.worker_id: WorkerLoadStats(**{f: getattr(w, f) for f in WORKER_STATS_FIELDS}) for w in snapshot.workers}
        ),
    )


def snapshot_to_pb(snapshot: LoadSnapshot) -> pb.LoadSnapshot:
    return pb.LoadSnapshot(
        group_id=snapshot.group_id,
        snapshot_id=snapshot.snapshot_id,
        created_ms=snapshot.created_ms,
        tasks=[pb.TaskLoadStats(**{f: getattr(t, f) for f in TASK_STATS_FIELDS}) for t in snapshot.tasks.values()],
        workers=[
            pb.WorkerLoadStats(**{f: getattr(w, f) for f in WORKER_STATS_FIELDS}) for w in snapshot.workers.values()
        ],
    )
