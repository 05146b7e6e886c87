"""``kafka-replica-shift``'s incremental target (``assignors.kafka_replica_incremental``).

Property (hypothesis): two instances with the same history, one fed full passes and one
``assign_incremental`` (the full pass when it declines, as the coordinator does), give the same
targets round after round; the incremental one answers exactly when tasks were only added after
every placed one with the members unchanged (Kafka's partitions added with ``startPartitionId``), and
then no placed task moves.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.incremental import IncrementalAssignor, TargetChange
from groupcoord.assignors.kafka_replica import KafkaReplicaShiftAssignor

Target = dict[str, frozenset[TaskReplica]]


def context(members: tuple[MemberInfo, ...], tasks: list[str]) -> AssignmentContext:
    """As the coordinator builds it: tasks in id order, the default random source (its fixed seed)."""
    return AssignmentContext("g", 1, members, tuple(TaskSpec(t) for t in sorted(tasks)))


def as_target(assignor: KafkaReplicaShiftAssignor, ctx: AssignmentContext) -> Target:
    answer = assignor.assign(ctx)
    return {m: frozenset(r) for m, r in answer.members.items()}


def change(previous: Target, members: tuple[MemberInfo, ...], before: list[str], after: list[str]) -> TargetChange:
    """What the coordinator hands over: the previous target of the members still here, the replicas
    without a member (their member left, or the task is new) and those deleted."""
    here = {m.member_id for m in members}
    orphans = {r for m, tasks in previous.items() if m not in here for r in tasks}
    added = {TaskReplica(t) for t in set(after) - set(before)}
    return TargetChange(previous={m: t for m, t in previous.items() if m in here}, members=members,
                        homeless=frozenset(orphans | added), removed=frozenset(TaskReplica(t) for t in
                                                                               set(before) - set(after)),
                        total=len(after), plain=True, group_id="g")


def either(assignor: KafkaReplicaShiftAssignor, step: TargetChange, ctx: AssignmentContext) -> tuple[Target, bool]:
    answer = assignor.assign_incremental(step)
    return (dict(answer), True) if answer is not None else (as_target(assignor, ctx), False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_incremental_is_the_full_pass_and_answers_when_tasks_are_added_at_the_end(data: st.DataObject) -> None:
    racked = data.draw(st.booleans())
    n = data.draw(st.integers(1, 6))
    members = tuple(MemberInfo(f"m{i}", rack=f"r{i % 3}" if racked else "",
                               pool="p" if i == n - 1 and n > 1 and data.draw(st.booleans()) else "")
                    for i in range(n))
    tasks = sorted(f"t{i:03d}" for i in data.draw(st.lists(st.integers(100, 500), unique=True, max_size=30)))
    full, incremental = KafkaReplicaShiftAssignor(), KafkaReplicaShiftAssignor()
    assert isinstance(incremental, IncrementalAssignor)
    previous = as_target(full, context(members, tasks))
    assert as_target(incremental, context(members, tasks)) == previous
    for step in range(data.draw(st.integers(1, 3))):
        before, before_members = tasks, members
        kind = data.draw(st.sampled_from(("end", "end", "middle", "delete", "join", "leave", "none")))
        if kind == "end":
            last = max((int(t[1:4]) for t in tasks), default=99)
            tasks = tasks + [f"t{last + k:03d}" for k in range(1, data.draw(st.integers(1, 12)) + 1)]
        elif kind == "middle":
            tasks = sorted({*tasks, f"t{data.draw(st.integers(0, 99)):03d}a"})
        elif kind == "delete" and tasks:
            tasks = [t for t in tasks if t != data.draw(st.sampled_from(tasks))]
        elif kind == "join":
            members = (*members, MemberInfo(f"n{step}", rack="r0" if racked else ""))  # a name never used before
        elif kind == "leave" and len(members) > 1:
            members = members[1:]
        expected = as_target(full, context(members, tasks))
        target, quick = either(incremental, change(previous, members, before, tasks), context(members, tasks))
        assert target == expected
        only_appended = members == before_members and set(before) <= set(tasks) and all(
            t > max(before, default="") for t in set(tasks) - set(before)) and (
            tasks == before or any(not m.pool for m in members)) and (  # with nobody to deal to, the full pass says so
            sum(map(len, previous.values())) == len(before))  # and a previous target that left some unplaced
        assert quick == only_appended
        if quick:
            assert all(previous[m] <= target[m] for m in previous)  # nothing placed moves
        previous = target


def test_what_it_declines() -> None:
    members = (MemberInfo("a"), MemberInfo("b"), MemberInfo("c"))
    assignor = KafkaReplicaShiftAssignor()
    assert assignor.assign_incremental(change({}, members, [], ["t1"])) is None  # nothing placed for this group yet
    previous = as_target(assignor, context(members, ["t1", "t2", "t3"]))
    added = change(previous, members, ["t1", "t2", "t3"], ["t1", "t2", "t3", "t4"])
    assert assignor.assign_incremental(TargetChange(added.previous, members, added.homeless, added.removed, 4,
                                                    plain=False, group_id="g")) is None  # pools, replicas, weights
    assert assignor.assign_incremental(TargetChange(added.previous, members, frozenset(), frozenset(), 4, plain=True,
                                                    group_id="g")) is None  # a replica unaccounted for
    other = KafkaReplicaShiftAssignor()
    other.assign(AssignmentContext("g", 1, members, (TaskSpec("t1", replicas=2),)))
    assert other.assign_incremental(change({}, members, ["t1"], ["t1", "t2"])) is None  # a pass that was not plain
    answer = assignor.assign_incremental(added)
    assert answer is not None and sum(map(len, answer.values())) == 4
