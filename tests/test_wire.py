"""``groupcoord.wire``: protobuf -> domain -> protobuf gives back the message, field for field.

Every field of the messages is set to a distinct non-default value (taken from the message's
descriptor, so a field added to the ``.proto`` is covered too): a conversion that drops,
swaps or renames a field fails here.
"""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from groupcoord import wire
from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec, TaskSplit
from groupcoord.assignors.round_robin import RoundRobinAssignor
from groupcoord.loadstats.samples import LoadReport, ResourceUsage, TaskLoad
from groupcoord.v1 import groupcoord_pb2 as pb


def filled(cls: type[Message], seed: int, **given: object) -> Message:
    """A ``cls`` message (flat: scalar fields only) with every field set to a distinct non-default
    value; ``given`` fields win."""
    descriptor: Descriptor = cls.DESCRIPTOR
    values: dict[str, object] = {}
    for i, f in enumerate(descriptor.fields, start=1):
        assert f.message_type is None, f"{cls.__name__}.{f.name} is not a scalar"
        if f.name in given:
            continue
        n = seed * 100 + i
        if f.type == FieldDescriptor.TYPE_STRING:
            values[f.name] = f"{f.name}-{n}"
        elif f.type == FieldDescriptor.TYPE_BOOL:
            values[f.name] = True
        elif f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            values[f.name] = n + 0.25
        else:
            values[f.name] = n
    return cls(**values, **given)


def report_pb() -> pb.LoadReport:
    return pb.LoadReport(
        ts_ms=1_700_000_000_123,
        cpu=pb.ResourceUsage(usage=12.5, limit=400.0),
        memory=pb.ResourceUsage(usage=512.0, limit=2048.0),
        direct_memory=pb.ResourceUsage(usage=0.0, limit=0.0),  # present even when unknown
        bandwidth_in=pb.ResourceUsage(usage=10.0, limit=125_000.0),
        bandwidth_out=pb.ResourceUsage(usage=20.0, limit=-1.0),
        tasks=[filled(pb.TaskLoadReport, seed, task_id=f"t{seed}") for seed in (1, 2)],
    )


def snapshot_pb() -> pb.LoadSnapshot:
    return pb.LoadSnapshot(
        group_id="g",
        snapshot_id="0001700000000000-abcd",
        created_ms=1_700_000_000_000,
        tasks=[filled(pb.TaskLoadStats, seed, task_id=f"t{seed}") for seed in (1, 2)],
        workers=[filled(pb.WorkerLoadStats, seed, worker_id=f"w{seed}") for seed in (1, 2)],
    )


def test_load_report_round_trip() -> None:
    message = report_pb()
    report = wire.report_from_pb(message)
    assert report.cpu == ResourceUsage(12.5, 400.0)
    assert report.tasks[1].task_id == "t2" and report.tasks[1].consumers == message.tasks[1].consumers
    assert wire.report_to_pb(report) == message
    assert wire.report_to_pb(report).SerializeToString(deterministic=True) == message.SerializeToString(
        deterministic=True
    )


def test_load_report_domain_round_trip() -> None:
    report = LoadReport(
        ts_ms=5, cpu=(1.0, 2.0), bandwidth_out=(3.0, 4.0),
        tasks=(TaskLoad("a", msg_rate_in=1.5, msg_throughput_out=9.0, topics=3, producers=1, consumers=2),),
    )
    assert wire.report_from_pb(wire.report_to_pb(report)) == report


def test_snapshot_round_trip() -> None:
    message = snapshot_pb()
    snapshot = wire.snapshot_from_pb(message)
    assert list(snapshot.tasks) == ["t1", "t2"] and list(snapshot.workers) == ["w1", "w2"]
    assert snapshot.tasks["t2"].long_msg_throughput_out == message.tasks[1].long_msg_throughput_out
    assert snapshot.workers["w1"].direct_memory_limit == message.workers[0].direct_memory_limit
    assert wire.snapshot_to_pb(snapshot) == message


def join_response_pb() -> pb.JoinGroupResponse:
    def member(i: int) -> pb.GroupMember:
        owned = [pb.TaskReplica(task_id="t1", replica=i), pb.TaskReplica(task_id=f"t{i}", replica=0)]
        return pb.GroupMember(
            member_id=f"m{i}", instance_id=f"i{i}", client_id=f"c{i}", host=f"h{i}",
            metadata=pb.MemberMetadata(
                rack=f"r{i}", pool="p", capacity=1.5 + i, attributes={"zone": f"z{i}"},
                owned=owned, owned_generation=6,
            ),
            assigned=owned,  # the coordinator's record agrees with the claim
        )

    return pb.JoinGroupResponse(
        generation=7,
        members=[member(1), member(2)],
        tasks=[
            pb.Task(task_id="t1", replicas=2, pool="p", weight=2.5, attributes={"k": "v"}),
            pb.Task(task_id="t2", replicas=1, pool="p", weight=1.0),
        ],
        load_snapshot=snapshot_pb(),
    )


def test_assignment_context_round_trip() -> None:
    message = join_response_pb()
    context = wire.context_from_join("g", message)
    assert context.generation == 7 and [m.member_id for m in context.members] == ["m1", "m2"]
    assert context.members[1].owned == (TaskReplica("t1", 2), TaskReplica("t2", 0))
    assert context.members[0].attributes == {"zone": "z1"} and context.tasks[0].weight == 2.5
    assert context.load_snapshot == wire.snapshot_from_pb(message.load_snapshot)
    assert context.rng.random() == random.Random(7).random()  # seeded by the generation
    assert wire.join_response_from_context(context) == message


@pytest.mark.parametrize("protocol", ["cooperative", ""])
def test_a_context_takes_owned_from_what_the_coordinator_counts_never_from_claims(protocol: str) -> None:
    message = join_response_pb()
    message.rebalance_protocol = protocol
    del message.members[0].assigned[:]
    message.members[0].assigned.add(task_id="t9", replica=0)  # m1 runs t9, whatever its metadata says
    del message.members[1].assigned[:]  # m2 claims t1#2 and t2#0 (and generation 6): not believed
    context = wire.context_from_join("g", message)
    assert context.rebalance_protocol == (protocol or "eager")
    assert context.members[0].owned == (TaskReplica("t9", 0),) and context.members[1].owned == ()
    assert context.members[0].owned_generation == 6 and context.members[1].owned_generation == -1
    again = wire.context_from_join("g", wire.join_response_from_context(context))
    assert [m.owned for m in again.members] == [m.owned for m in context.members]


def test_assignment_context_domain_round_trip_and_defaults() -> None:
    context = AssignmentContext(
        group_id="g", generation=3,
        members=(MemberInfo("b", rack="r", owned=(TaskReplica("x", 1),), owned_generation=2), MemberInfo("a")),
        tasks=(TaskSpec("y", attributes=MappingProxyType({"k": "v"})), TaskSpec("x", replicas=2, pool="")),
    )
    again = wire.context_from_join("g", wire.join_response_from_context(context))
    assert (again.members, again.tasks, again.load_snapshot) == (context.members, context.tasks, None)
    # unset replicas, weight and capacity (0 on the wire) mean 1
    bare = wire.context_from_join("g", pb.JoinGroupResponse(members=[pb.GroupMember(member_id="m")],
                                                             tasks=[pb.Task(task_id="t")]))
    assert (bare.tasks[0].replicas, bare.tasks[0].weight, bare.members[0].capacity) == (1, 1.0, 1.0)
    assert bare.load_snapshot is None


def test_context_from_describe_owns_the_current_assignment() -> None:
    join = join_response_pb()
    response = pb.DescribeGroupResponse(
        group_id="g", generation=9, tasks=join.tasks, load_snapshot=join.load_snapshot,
        members=[
            pb.DescribedMember(member=join.members[0], assigned=[pb.TaskReplica(task_id="t2", replica=0)]),
            pb.DescribedMember(member=join.members[1], assigned=[]),
        ],
    )
    context = wire.context_from_describe(response)
    assert [(m.member_id, m.owned, m.owned_generation) for m in context.members] == [
        ("m1", (TaskReplica("t2", 0),), 9),
        ("m2", (), 9),
    ]
    assert context.members[0].rack == "r1" and context.load_snapshot is not None


def test_sync_request_is_sorted_and_carries_splits() -> None:
    assignment = Assignment(
        members={"m2": [TaskReplica("t1", 0)], "m1": [TaskReplica("t2", 0), TaskReplica("t1", 1)]},
        unassigned={TaskReplica("t3", 1): "pool empty", TaskReplica("t3", 0): "pool empty"},
        splits=[TaskSplit("t4", (TaskSpec("t4a", weight=0.5), TaskSpec("t4b", weight=0.5)))],
    )
    request = wire.sync_request_from_assignment("g", "m1", 4, assignment)
    assert (request.group_id, request.member_id, request.generation) == ("g", "m1", 4)
    assert [(a.member_id, wire.replicas_from_pb(a.tasks)) for a in request.assignments] == [
        ("m1", (TaskReplica("t2", 0), TaskReplica("t1", 1))),
        ("m2", (TaskReplica("t1", 0),)),
    ]
    assert [(u.task.replica, u.reason) for u in request.unassigned] == [(0, "pool empty"), (1, "pool empty")]
    assert [wire.task_spec(c) for c in request.splits[0].children] == list(assignment.splits[0].children)


def test_a_leader_round_trip_through_an_assignor() -> None:
    """What the worker does as leader: join response -> context -> assignor -> SyncGroup request."""
    context = wire.context_from_join("g", join_response_pb())
    request = wire.sync_request_from_assignment("g", "m1", 7, RoundRobinAssignor().assign(context))
    placed = sorted(r for a in request.assignments for r in wire.replicas_from_pb(a.tasks))
    assert placed == [TaskReplica("t1", 0), TaskReplica("t1", 1), TaskReplica("t2", 0)]
