"""Load in the consumer protocol, on the model and a fake clock (``coordinator.model.consumer_load``): members'
ReportLoad is taken as a classic member's, and a published snapshot is checked at the assignor's interval,
once per snapshot, on the newest; a yes moves the group epoch, a no or a failed check does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from groupcoord.assignors.base import Assignment, AssignmentContext
from groupcoord.assignors.registry import register
from groupcoord.assignors.sticky import StickyAssignor
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.model.consumer_load import SHED_TIMER, recheck_interval_s
from groupcoord.coordinator.model.effects import ArmTimer, Effect, Offload, RecordLoad, Reply, TimerKey
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"
CHECK = "test-load-check"
SHED = TimerKey(SHED_TIMER, G)


class Checking:
    """Sticky, with the ``RebalanceCheck`` hook: every 60 s; says ``verdict`` (or raises) and records the
    snapshot ids it was asked on."""

    name = CHECK
    recheck_interval_s = 60.0

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.verdict: bool | Exception = False
        self.inner = StickyAssignor()

    def assign(self, context: AssignmentContext) -> Assignment:
        return self.inner.assign(context)

    def needs_rebalance(self, context: AssignmentContext) -> bool:
        assert context.load_snapshot is not None
        self.asked.append(context.load_snapshot.snapshot_id)
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict


@pytest.fixture
def checking() -> Iterator[Checking]:
    assignor = Checking()
    register(assignor, replace=True)  # type: ignore[arg-type]
    yield assignor


def run(model: CoordinatorModel, effects: list[Effect]) -> list[Effect]:
    """The effects, with every offloaded job run and its landing's effects added."""
    done: list[Effect] = []
    for effect in effects:
        done.append(effect)
        if isinstance(effect, Offload):
            done += run(model, effect.then(effect.job()))
    return done


def join(model: CoordinatorModel, name: str, assignor: str = CHECK, instance: str = "") -> str:
    request = pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, client_id=name, assignor=assignor)
    if instance:  # a dynamic member leaves the field out (an empty one is INVALID_REQUEST, as Kafka's)
        request.instance_id = instance
    effects = run(model, model.group_heartbeat(request, 1))
    [reply] = [e for e in effects if isinstance(e, Reply)]
    response: Any = reply.response
    assert response.error.code == pb.NONE, response.error
    return str(response.member_id)


def formed(clock: FakeClock, assignor: str = CHECK) -> tuple[CoordinatorModel, list[str]]:
    model = CoordinatorModel(clock=clock)
    model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=f"t{i}") for i in range(4)]), 1)
    members = [join(model, "a", assignor), join(model, "b", assignor)]
    run(model, model.fire(TimerKey("c-assign", G)))
    group = model.consumer.groups[G]
    assert group.target_epoch == group.epoch
    return model, members


def reconciled(model: CoordinatorModel) -> None:
    """Every member heartbeats what it was given until each runs its target (the full pass reads what
    members run)."""
    group = model.consumer.groups[G]
    for _ in range(4):
        for member in list(group.members.values()):
            owned = pb.TaskReplicaList(tasks=[pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                              for t in sorted(member.reconciled.assigned)])
            run(model, model.group_heartbeat(pb.GroupHeartbeatRequest(
                group_id=G, member_id=member.member_id, member_epoch=member.epoch, owned=owned), 2))
    assert all(m.reconciled.assigned == group.target_of(m.member_id) for m in group.members.values())


def publish(model: CoordinatorModel, snapshot_id: str, created_ms: int) -> list[Effect]:
    snapshot = pb.LoadSnapshot(group_id=G, snapshot_id=snapshot_id, created_ms=created_ms)
    effects = model.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snapshot), 7)
    [reply] = [e for e in effects if isinstance(e, Reply)]
    assert reply.response.error.code == pb.NONE  # type: ignore[attr-defined]
    return effects


def armed(effects: list[Effect]) -> list[float]:
    return [e.delay_s for e in effects if isinstance(e, ArmTimer) and e.key == SHED]


def test_a_snapshot_is_checked_one_interval_after_the_last_target_once_and_on_the_newest(
        checking: Checking) -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    clock.advance(20)
    assert armed(publish(model, "s1", 1)) == [pytest.approx(40)]  # 60 s after the target was computed
    assert armed(publish(model, "s2", 2)) == [pytest.approx(40)]  # the same deadline: one check, on the newest
    clock.advance(40)
    epoch = model.consumer.groups[G].epoch
    run(model, model.fire(SHED))
    assert checking.asked == ["s2"]
    assert model.consumer.groups[G].epoch == epoch  # it said no: nothing moves
    assert armed(publish(model, "s2", 2)) == [pytest.approx(60)]  # the same again: armed, never asked twice
    clock.advance(60)
    run(model, model.fire(SHED))
    assert checking.asked == ["s2"]
    assert armed(publish(model, "s3", 3)) == [0.0]  # an interval has passed since the last check: at once


def test_a_yes_moves_the_epoch_and_the_next_target_reads_that_snapshot(checking: Checking) -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    group = model.consumer.groups[G]
    epoch = group.epoch
    publish(model, "hot", 5)
    clock.advance(60)
    checking.verdict = True
    effects = run(model, model.fire(SHED))
    assert checking.asked == ["hot"] and group.epoch == epoch + 1
    assert TimerKey("c-assign", G) in [e.key for e in effects if isinstance(e, ArmTimer)]
    run(model, model.fire(TimerKey("c-assign", G)))
    assert group.target_epoch == group.epoch and not group.computing
    model.validate()


def test_a_failing_check_is_a_no_and_the_group_goes_on(checking: Checking, caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    group = model.consumer.groups[G]
    epoch = group.epoch
    publish(model, "s1", 1)
    clock.advance(60)
    checking.verdict = RuntimeError("no figures")
    run(model, model.fire(SHED))
    assert group.epoch == epoch and not group.computing
    assert "load check failed: assignor 'test-load-check': RuntimeError: no figures" in caplog.text
    join(model, "c")  # the next change computes as ever
    run(model, model.fire(TimerKey("c-assign", G)))
    assert group.target_epoch == group.epoch


def test_a_client_group_moves_its_epoch_so_its_leader_is_asked_with_the_snapshot(checking: Checking) -> None:
    clock = FakeClock()
    model = CoordinatorModel(clock=clock)
    join(model, "a", f"client:{CHECK}")
    group = model.consumer.groups[G]
    group.computing, group.asked = False, None  # the first ask (not answered here) is not the point
    epoch = group.epoch
    assert armed(publish(model, "s1", 1))
    clock.advance(60)
    run(model, model.fire(SHED))
    assert group.epoch == epoch + 1 and checking.asked == []  # the leader's assignor decides, not ours


def test_assignors_without_the_check_arm_nothing(checking: Checking) -> None:
    assert recheck_interval_s("sticky") == 0 and recheck_interval_s("no-such") == 0
    assert recheck_interval_s("pulsar-avg") == 60 and recheck_interval_s("client:pulsar-avg") == 60
    model, _ = formed(FakeClock(), "sticky")
    assert armed(publish(model, "s1", 1)) == []


def test_consumer_members_report_load_and_others_are_refused(checking: Checking) -> None:
    model, (a, _b) = formed(FakeClock())
    static = join(model, "s", instance="i-1")
    report = pb.LoadReport(ts_ms=1, tasks=[pb.TaskLoadReport(task_id="t0")])

    def answer(member_id: str, sent: pb.LoadReport = report) -> tuple[int, list[RecordLoad]]:
        effects = model.report_load(pb.ReportLoadRequest(group_id=G, member_id=member_id, report=sent), 3)
        [reply] = [e for e in effects if isinstance(e, Reply)]
        return reply.response.error.code, [e for e in effects if isinstance(e, RecordLoad)]  # type: ignore[attr-defined]

    code, recorded = answer(a)
    assert code == pb.NONE and [(r.group_id, r.member_id) for r in recorded] == [(G, a)]
    assert answer("nobody") == (pb.UNKNOWN_MEMBER_ID, [])
    too_many = pb.LoadReport(tasks=[pb.TaskLoadReport(task_id=f"x{i}") for i in range(100_000)])
    assert answer(a, too_many) == (pb.INVALID_REQUEST, [])
    run(model, model.group_heartbeat(pb.GroupHeartbeatRequest(
        group_id=G, member_id=static, member_epoch=-2, instance_id="i-1"), 4))
    assert answer(static) == (pb.UNKNOWN_MEMBER_ID, [])  # away (epoch -2): its next process reports


def test_a_pulsar_group_joins_incrementally_under_the_snapshot_its_shedder_judged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new snapshot: the shedder's check at the interval, a full pass on it; members joining under it
    then go incremental (nothing moves); the next snapshot is judged again."""
    from tests.coordinator.model.test_consumer_incremental import passes_of

    answers = passes_of("pulsar-overload", monkeypatch)
    clock = FakeClock()
    model, (a, b) = formed(clock, "pulsar-overload")
    group = model.consumer.groups[G]
    reconciled(model)
    owner = {r.task_id: m for m, owned in group.target.items() for r in owned}
    hot = a if len(group.target[a]) >= len(group.target[b]) else b

    def snapshot(sid: str, created_ms: int, cpu: dict[str, float]) -> None:
        snap = pb.LoadSnapshot(group_id=G, snapshot_id=sid, created_ms=created_ms, tasks=[pb.TaskLoadStats(
            task_id=t, worker_id=m, short_samples=10, long_samples=100, short_msg_rate_in=1000.0,
            long_msg_rate_in=1000.0) for t, m in owner.items()],
            workers=[pb.WorkerLoadStats(worker_id=m, cpu_usage=c, cpu_limit=100.0) for m, c in cpu.items()])
        run(model, model.publish_load_snapshot(pb.PublishLoadSnapshotRequest(snapshot=snap), 1))

    snapshot("s1", 1, {a: 20.0, b: 20.0})
    answers.clear()
    clock.advance(60)
    run(model, model.fire(SHED))  # calm: no epoch moves, the snapshot is read at the next change
    join(model, "c", "pulsar-overload")
    run(model, model.fire(TimerKey("c-assign", G)))
    assert answers == ["declined", "full"]  # a snapshot not read yet
    reconciled(model)
    before = dict(group.target)
    c = join(model, "d", "pulsar-overload")
    run(model, model.fire(TimerKey("c-assign", G)))
    reconciled(model)
    assert answers[2:] == ["incremental"] and not group.target[c]
    assert all(group.target[m] == before[m] for m in before)
    snapshot("s2", 2, {hot: 99.0} | {m: 10.0 for m in group.members if m != hot})
    clock.advance(60)
    epoch = group.epoch
    run(model, model.fire(SHED))  # the shedder would move some: a new epoch, then a full pass
    run(model, model.fire(TimerKey("c-assign", G)))
    assert group.epoch == epoch + 1 and answers[3:] == ["declined", "full"]
    assert len(group.target[hot]) < len(before[hot])
    model.validate()


def test_kafka_replica_shift_deals_tasks_added_at_the_end_incrementally(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks whose ids sort after the others: dealt on from where the last round stopped, nothing placed
    moves; one sorting among them renumbers the partitions after it: a full pass."""
    from groupcoord.assignors.registry import get_assignor

    assignor = get_assignor("kafka-replica-shift")
    answers: list[str] = []
    incremental = assignor.assign_incremental  # type: ignore[attr-defined]
    monkeypatch.setattr(assignor, "assign_incremental", lambda change: answers.append(
        "declined" if (answer := incremental(change)) is None else "incremental") or answer)
    model, _ = formed(FakeClock(), "kafka-replica-shift")
    group = model.consumer.groups[G]
    before = dict(group.target)
    run(model, model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="u1"), pb.Task(task_id="u2")]),
                               1))
    run(model, model.fire(TimerKey("c-assign", G)))
    assert answers == ["incremental"] and all(before[m] <= group.target[m] for m in before)
    run(model, model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="a0")]), 1))
    run(model, model.fire(TimerKey("c-assign", G)))
    assert answers[1:] == ["declined"] and group.target_epoch == group.epoch
    assert sorted(r.task_id for owned in group.target.values() for r in owned) == sorted(
        ["a0", "u1", "u2", "t0", "t1", "t2", "t3"])


def test_what_was_checked_goes_with_its_group(checking: Checking) -> None:
    """Groups come and go (a tenant can make many): the check's record is not kept for a gone one."""
    import gc

    clock = FakeClock()
    model, members = formed(clock)
    publish(model, "s1", 1)
    clock.advance(60)
    run(model, model.fire(SHED))
    assert model.rechecks.checked_on(G) == ("s1", 1)
    for member_id in members:
        group = model.consumer.groups[G]
        run(model, model.group_heartbeat(pb.GroupHeartbeatRequest(
            group_id=G, member_id=member_id, member_epoch=-1), 5))
    del group
    gc.collect()
    assert G not in model.consumer.groups and len(model.rechecks._checked) == 0
    assert model.rechecks.checked_on(G) is None
