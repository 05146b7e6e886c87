"""Rebalance timeout (3 s) shorter than the session (10 s): the worker's member core against the coordinator's
model on one fake clock. The coordinator hands a task on once the member it asked to give it up has not
done so within its rebalance timeout (``c-revoke``); a member cut off just as it was asked never hears
that it was asked, so it must have stopped the task by itself before then (issue 34 item 2: a task goes
to its new owner only once its previous owner no longer runs it)."""

from __future__ import annotations

from typing import Any

from groupcoord import errors
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.consumer_member import ConsumerMember
from groupcoord.worker.effects import Call, Deliver, Effect, Sleep, advance
from tests.coordinator.model.consumer_sim import Fleet, G, heartbeat

STEP_S = 0.05


class CoreOnModel:
    """A ``ConsumerMember`` whose calls go to the model, answered at once, or lost once ``cut`` is set
    (after the coordinator processed the first lost one, when ``lose_answer_only``)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        config = WorkerConfig(group_id=G, coordinators=("127.0.0.1:1",), client_id="old", protocol="consumer",
                              session_timeout_ms=10_000, rebalance_timeout_ms=3_000, heartbeat_interval_ms=1_000,
                              retry_backoff_ms=100, retry_backoff_max_ms=1_000)
        self.member = ConsumerMember(config, monotonic=h.clock.now)
        self.member.machine.fire("start")
        self.steps = self.member.run()
        self.effect: Effect | None = advance(self.steps)
        self.wake_at: float | None = None
        self.cut = False
        self.lose_answer_only = False

    def running(self) -> set[TaskReplica]:
        return set(self.member.tasks.assigned)

    def step(self) -> None:
        """Carry out effects until the core sleeps past now (a sleep is over when the clock gets there)."""
        while self.effect is not None:
            answer: Any = None
            failure: BaseException | None = None
            if isinstance(self.effect, Sleep):
                if self.wake_at is None:
                    self.wake_at = self.h.clock.now() + self.effect.seconds
                if self.h.clock.now() < self.wake_at:
                    return
                self.wake_at = None
            elif isinstance(self.effect, Call):
                answer, failure = self._call(self.effect)
            elif isinstance(self.effect, Deliver):
                answer = True
            self.effect = advance(self.steps, answer, failure)

    def _call(self, call: Call) -> tuple[Any, BaseException | None]:
        lost = errors.CoordinatorNotAvailableError("deadline exceeded")
        if self.cut and not self.lose_answer_only:
            return None, lost
        response = heartbeat(self.h, call.request).response  # type: ignore[arg-type]
        if self.cut:  # the coordinator heard it; its answer never arrives
            self.lose_answer_only = False
            return None, lost
        failure = errors.error_for(response.error, member_id=response.member_id)
        return (None, failure) if failure is not None else (response, None)


def test_a_member_cut_off_mid_change_stops_before_the_coordinator_hands_its_task_on() -> None:
    h = Harness(CoordinatorConfig(consumer_heartbeat_interval_ms=1_000))
    assert h.put_tasks(G, "t0", "t1") == pb.NONE
    old = CoreOnModel(h)
    for _ in range(40):  # joins alone; takes both tasks
        h.advance(STEP_S)
        old.step()
    assert old.running() == {TaskReplica("t0"), TaskReplica("t1")}
    fleet = Fleet(h, ["new"])
    fleet.join("new")  # the target gives one of old's tasks to new
    h.advance(0.5)  # the target is computed
    old.cut, old.lose_answer_only = True, True  # old's next heartbeat is heard, and asked to give one up: lost
    handed_on_at = None
    for _ in range(int(12 / STEP_S)):
        h.advance(STEP_S)
        old.step()
        fleet.beat("new")
        both = old.running() & fleet.members["new"].running
        assert not both, f"{sorted(both)} run by old and new at once, {h.clock.now():.2f}"
        if fleet.members["new"].running and handed_on_at is None:
            handed_on_at = h.clock.now()
    assert handed_on_at is not None, "new never got its task"
    assert old.running() == set() and fleet.members["new"].running
