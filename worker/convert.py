"""Between the wire (protobuf) and the assignor contract (plain dataclasses)."""

from __future__ import annotations

import random
from types import MappingProxyType

from assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["context_from_join", "context_from_describe", "sync_request_from_assignment", "replicas_from_pb", "snapshot_from_pb", "task_spec"]


def replicas_from_pb(replicas: object) -> tuple[TaskReplica, ...]:
    return tuple(TaskReplica(r.task_id, r.replica) for r in replicas)  # type: ignore[attr-defined]


def task_spec(task: pb.Task) -> TaskSpec:
    return TaskSpec(
        task_id=task.task_id,
        replicas=task.replicas or 1,
        pool=task.pool,
        weight=task.weight or 1.0,
        attributes=MappingProxyType(dict(task.attributes)),
    )


def task_pb(spec: TaskSpec) -> pb.Task:
    return pb.Task(
        task_id=spec.task_id, replicas=spec.replicas, pool=spec.pool, weight=spec.weight,
        attributes=dict(spec.attributes),
    )


def _member_info(member: pb.GroupMember) -> MemberInfo:
    md = member.metadata
    return MemberInfo(
        member_id=member.member_id,
        instance_id=member.instance_id,
        client_id=member.client_id,
        host=member.host,
        rack=md.rack,
        pool=md.pool,
        capacity=md.capacity or 1.0,
        attributes=MappingProxyType(dict(md.attributes)),
        owned=replicas_from_pb(md.owned),
        owned_generation=md.owned_generation,
    )


def snapshot_from_pb(snapshot: pb.LoadSnapshot) -> LoadSnapshot:
    def plain(message: object, cls: type) -> object:
        return cls(**{f: getattr(message, f) for f in cls.__dataclass_fields__})  # type: ignore[attr-defined]

    return LoadSnapshot(
        group_id=snapshot.group_id,
        snapshot_id=snapshot.snapshot_id,
        created_ms=snapshot.created_ms,
        tasks=MappingProxyType({t.task_id: plain(t, TaskLoadStats) for t in snapshot.tasks}),  # type: ignore[misc]
        workers=MappingProxyType({w.worker_id: plain(w, WorkerLoadStats) for w in snapshot.workers}),  # type: ignore[misc]
    )


def snapshot_to_pb(snapshot: LoadSnapshot) -> pb.LoadSnapshot:
    def fields(obj: object) -> dict[str, object]:
        return {f: getattr(obj, f) for f in obj.__dataclass_fields__}  # type: ignore[attr-defined]

    return pb.LoadSnapshot(
        group_id=snapshot.group_id,
        snapshot_id=snapshot.snapshot_id,
        created_ms=snapshot.created_ms,
        tasks=[pb.TaskLoadStats(**fields(t)) for t in snapshot.tasks.values()],
        workers=[pb.WorkerLoadStats(**fields(w)) for w in snapshot.workers.values()],
    )


def context_from_join(group_id: str, response: pb.JoinGroupResponse, seed: int | None = None) -> AssignmentContext:
    """The leader's view of the group in this generation; the random source is seeded by the
    generation (unless given) so a re-run of the same generation decides the same way."""
    snapshot = snapshot_from_pb(response.load_snapshot) if response.HasField("load_snapshot") else None
    return AssignmentContext(
        group_id=group_id,
        generation=response.generation,
        members=tuple(_member_info(m) for m in response.members),
        tasks=tuple(task_spec(t) for t in response.tasks),
        load_snapshot=snapshot,
        rng=random.Random(response.generation if seed is None else seed),
    )


def context_from_describe(response: pb.DescribeGroupResponse) -> AssignmentContext:
    """The group as it runs now (owned = current assignment), for the leader's periodic re-check."""
    members = []
    for described in response.members:
        metadata = pb.MemberMetadata()
        metadata.CopyFrom(described.member.metadata)
        del metadata.owned[:]
        metadata.owned.extend(described.assigned)
        metadata.owned_generation = response.generation
        member = pb.GroupMember()
        member.CopyFrom(described.member)
        member.metadata.CopyFrom(metadata)
        members.append(_member_info(member))
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
    return pb.SyncGroupRequest(
        group_id=group_id,
        member_id=member_id,
        generation=generation,
        assignments=[
            pb.MemberAssignment(
                member_id=m,
                tasks=[pb.TaskReplica(task_id=r.task_id, replica=r.replica) for r in replicas],
            )
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
