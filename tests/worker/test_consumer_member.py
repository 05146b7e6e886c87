"""The consumer-protocol member (``worker.consumer_member``) as one scenario table.

Core rows walk ``ConsumerMember.run()`` with a fake clock, answering each effect as a driver would;
driver rows run BOTH clients (``WorkerClient``, ``AsyncWorkerClient``, through
``tests/worker/member_drivers.py``) against a real coordinator on loopback. Bad settings last.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.consumer_member import ConsumerMember
from groupcoord.worker.effects import Call, Deliver, Effect, Joined, Sleep, WorkerClosedError, advance
from groupcoord.worker.states import WorkerState
from groupcoord.worker.stream_tags import Nudge, NudgeKind
from tests.cli.test_parser import _outcome
from tests.worker.member_drivers import DRIVERS, Driven

T = (TaskReplica("a"), TaskReplica("b"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Walk:
    """A member's steps walked by hand: ``effect`` is what the core asks for now; ``seen`` what it asked."""

    def __init__(self, member: ConsumerMember, steps: Any) -> None:
        self.member = member
        self.steps = steps
        self.effect: Effect | None = advance(steps)
        self.seen: list[Effect] = []

    def answer(self, value: Any = None) -> Effect | None:
        assert self.effect is not None
        self.seen.append(self.effect)
        self.effect = advance(self.steps, value)
        return self.effect

    def fail(self, error: BaseException) -> Effect | None:
        assert self.effect is not None
        self.seen.append(self.effect)
        self.effect = advance(self.steps, None, error)
        return self.effect

    def to_call(self) -> Call:
        """Answer sleeps, listener calls (returned in time) and ``on_joined`` until the core makes a call."""
        while not isinstance(self.effect, Call):
            assert self.effect is not None, "the steps ended"
            self.answer(True if isinstance(self.effect, Deliver) else None)
        return self.effect

    def notices(self) -> list[tuple[str, tuple[TaskReplica, ...]]]:
        return [(e.notice.kind, e.notice.tasks) for e in self.seen if isinstance(e, Deliver)]


def config(**overrides: Any) -> WorkerConfig:
    settings: dict[str, Any] = {"group_id": "g", "coordinators": ("127.0.0.1:1",), "client_id": "w",
                                "protocol": "consumer", "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
                                "retry_backoff_ms": 100, "retry_backoff_max_ms": 1000}
    settings.update(overrides)
    return WorkerConfig(**settings)


def answer(epoch: int, tasks: Sequence[TaskReplica] | None = None, interval_ms: int = 500) -> pb.GroupHeartbeatResponse:
    response = pb.GroupHeartbeatResponse(member_id="m-1", member_epoch=epoch, heartbeat_interval_ms=interval_ms)
    if tasks is not None:
        response.assignment.SetInParent()
        response.assignment.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in tasks)
    return response


def owned(call: Call) -> set[TaskReplica] | None:
    request = call.request
    if not request.HasField("owned"):  # type: ignore[attr-defined]
        return None
    return {TaskReplica(t.task_id, t.replica) for t in request.owned.tasks}  # type: ignore[attr-defined]


def running_member(clock: Clock, **overrides: Any) -> Walk:
    """A member joined at epoch 1 running ``T``, its ack sent and answered: its next effect is the interval's sleep."""
    member = ConsumerMember(config(**overrides), monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    walk.to_call()
    walk.answer(answer(1, T))
    ack = walk.to_call()
    assert owned(ack) == set(T)
    walk.answer(answer(1))
    assert member.machine.state is WorkerState.STABLE and isinstance(walk.effect, Sleep) and walk.effect.heartbeat
    return walk


# ------------------------------------------------------------------ the pure rows


def a_join_has_epoch_0_and_everything_the_coordinator_keeps_but_owned(clock: Clock) -> None:
    member = ConsumerMember(config(rack="r1", instance_id="i-1", server_assignor="uniform"), monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    join = walk.to_call()
    request = join.request
    assert join.method == "group_heartbeat" and member.machine.state is WorkerState.JOINING
    assert request.member_epoch == 0 and request.member_id.startswith("i-1-")  # type: ignore[attr-defined]
    assert request.metadata.rack == "r1" and request.instance_id == "i-1"  # type: ignore[attr-defined]
    assert request.assignor == "uniform" and request.session_timeout_ms == 6000  # type: ignore[attr-defined]
    assert owned(join) is None  # a join owns nothing
    joined = walk.answer(answer(3, ()))
    assert isinstance(joined, Joined) and joined.generation == 3 and member.machine.state is WorkerState.STABLE
    walk.answer()
    assert walk.notices() == [] and isinstance(walk.effect, Deliver) and walk.effect.notice.kind == "assigned"


def a_dynamic_join_names_no_instance_and_no_assignor(clock: Clock) -> None:
    member = ConsumerMember(config(), monotonic=clock)
    member.machine.fire("start")
    request = Walk(member, member.run()).to_call().request
    assert not request.HasField("instance_id") and not request.HasField("assignor")  # type: ignore[attr-defined]


def heartbeats_keep_the_coordinators_interval_and_send_owned_only_when_it_changed(clock: Clock) -> None:
    walk = running_member(clock)
    assert walk.effect == Sleep(0.5, heartbeat=True)  # the coordinator's 500 ms, not the config's 1 s
    beat = walk.to_call()
    assert owned(beat) is None and not beat.request.HasField("metadata")  # type: ignore[attr-defined]
    assert beat.request.member_epoch == 1  # type: ignore[attr-defined]
    walk.answer(answer(2, interval_ms=4000))
    assert walk.effect == Sleep(3.0, heartbeat=True)  # at most half the 6 s session: two chances per session


def a_task_leaving_is_revoked_before_the_release_is_reported(clock: Clock) -> None:
    walk = running_member(clock)
    walk.to_call()
    walk.answer(answer(1, (TaskReplica("a"),)))  # b goes to someone else
    ack = walk.to_call()  # at once, no sleep: the coordinator waits for it
    assert walk.notices()[-2:] == [("revoked", (TaskReplica("b"),)), ("assigned", ())]
    revoked_at = next(i for i, e in enumerate(walk.seen) if isinstance(e, Deliver) and e.notice.kind == "revoked")
    assert not any(isinstance(e, Call) for e in walk.seen[revoked_at:])  # nothing reported before the listener ran
    assert owned(ack) == {TaskReplica("a")}
    walk.answer(answer(2, (TaskReplica("a"), TaskReplica("c"))))  # the new epoch brings c
    assert walk.to_call() and walk.notices()[-1] == ("assigned", (TaskReplica("c"),))


def the_same_assignment_again_tells_the_listener_nothing(clock: Clock) -> None:
    walk = running_member(clock)
    told = len(walk.notices())
    walk.to_call()
    walk.answer(answer(1, tuple(reversed(T))))
    assert isinstance(walk.effect, Sleep) and len(walk.notices()) == told


def fenced_loses_everything_and_joins_again_with_epoch_0(clock: Clock) -> None:
    walk = running_member(clock)
    walk.to_call()
    lost = walk.fail(errors.FencedMemberEpochError("epoch 1 is not 2"))
    assert isinstance(lost, Deliver) and lost.notice.kind == "lost" and lost.notice.tasks == T
    join = walk.to_call()
    assert join.request.member_epoch == 0 and join.request.member_id == "m-1"  # type: ignore[attr-defined]
    assert owned(join) is None and walk.member.tasks.assigned == ()


def an_unknown_member_does_the_same(clock: Clock) -> None:
    walk = running_member(clock)
    walk.to_call()
    walk.fail(errors.UnknownMemberIdError("gone"))
    join = walk.to_call()
    assert walk.notices()[-1] == ("lost", T) and join.request.member_epoch == 0  # type: ignore[attr-defined]


def an_unanswered_heartbeat_keeps_the_tasks_until_a_session_passes(clock: Clock) -> None:
    walk = running_member(clock)
    walk.to_call()
    clock.now += 0.5
    nap = walk.fail(errors.CoordinatorNotAvailableError("refused"))
    assert nap == Sleep(0.1, heartbeat=True) and walk.member.tasks.assigned == T  # sooner, tasks run on
    again = walk.answer()
    assert isinstance(again, Call) and owned(again) == set(T)  # told again: the last one may not have arrived
    assert again.timeout == 3.0  # half the session (the tasks may run 4.9 s more)
    clock.now += 5.0  # a session (less the margin) since the last answered heartbeat
    walk.fail(errors.CoordinatorNotAvailableError("refused"))
    assert isinstance(walk.effect, Sleep) and walk.effect.seconds == 0.0  # wakes at once to give them up
    lost = walk.answer()
    assert isinstance(lost, Deliver) and lost.notice.kind == "lost"  # before any call
    join = walk.answer(True)
    assert isinstance(join, Call) and join.request.member_epoch == 0  # type: ignore[attr-defined]


def an_unreachable_coordinator_is_tried_again_within_a_heartbeat_interval(clock: Clock) -> None:
    """As in the classic member: a coordinator back from a long restart hears from the member within the
    session it restarted (1 s interval here, the backoff's maximum 10 s); a refused join is not retried."""
    member = ConsumerMember(config(retry_backoff_max_ms=10_000), monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    waits = []
    for _ in range(12):  # the bare backoff would reach 10 s by the 8th
        walk.to_call()
        nap = walk.fail(errors.CoordinatorNotAvailableError("connection refused"))
        assert isinstance(nap, Sleep)
        waits.append(nap.seconds)
        clock.now += nap.seconds
    assert max(waits) == pytest.approx(1.0) and waits[0] < 0.3
    assert walk.to_call().request.member_epoch == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("error", [errors.UnreleasedInstanceIdError("instance i-1 is held by live member m-0"),
                                   errors.UnsupportedAssignorError("no assignor named 'nope'"),
                                   errors.InconsistentGroupProtocolError("group g runs the classic protocol")])
def a_refused_join_stops_with_the_coordinators_message(clock: Clock, error: errors.GroupCoordError) -> None:
    member = ConsumerMember(config(instance_id="i-1"), monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    walk.to_call()
    assert walk.fail(error) is None and member.fatal_error is error
    end = Walk(member, member.shutdown())
    assert end.effect is None and member.machine.state is WorkerState.DOWN  # nothing to revoke, nothing to leave


def closing_revokes_then_leaves_with_minus_1(clock: Clock) -> None:
    walk = running_member(clock)
    walk.member.closing = True
    assert walk.answer() is None
    end = Walk(walk.member, walk.member.shutdown())
    assert isinstance(end.effect, Deliver) and end.effect.notice.kind == "revoked"
    leave = end.answer(True)
    assert isinstance(leave, Call) and leave.method == "group_leave"
    assert leave.request.member_epoch == -1  # type: ignore[attr-defined]
    assert end.answer(True) is None and walk.member.machine.state is WorkerState.DOWN


def a_static_member_closing_leaves_for_a_while_with_minus_2(clock: Clock) -> None:
    walk = running_member(clock, instance_id="i-1")
    walk.member.closing = True
    walk.answer()
    end = Walk(walk.member, walk.member.shutdown())
    leave = end.answer(True)
    assert isinstance(leave, Call) and leave.request.member_epoch == -2  # type: ignore[attr-defined]
    assert leave.request.instance_id == "i-1"  # type: ignore[attr-defined]


def a_static_member_closing_mid_join_still_leaves_with_minus_2(clock: Clock) -> None:
    """Joined at epoch 0 (its group's first target not computed yet), or back at epoch 0 after a fence: the
    coordinator holds its instance id all the same, so it must leave, or its next process is refused
    UNRELEASED_INSTANCE_ID until this one's session ends (the downtime bench's static restart)."""
    for fenced in (False, True):
        member = ConsumerMember(config(instance_id="i-1"), monotonic=clock)
        member.machine.fire("start")
        walk = Walk(member, member.run())
        walk.to_call()
        walk.answer(answer(0 if not fenced else 1, () if not fenced else T))
        if fenced:
            walk.to_call()
            walk.fail(errors.FencedMemberEpochError("member epoch 1 is not m-1's (2)"))
            assert walk.to_call().request.member_epoch == 0  # type: ignore[attr-defined]
        member.closing = True  # the driver aborts the call in flight, if one is
        while walk.effect is not None:
            if isinstance(walk.effect, Call):
                walk.fail(WorkerClosedError("closed during a request"))
            else:
                walk.answer(True if isinstance(walk.effect, Deliver) else None)
        end = Walk(member, member.shutdown())
        leave = end.to_call()
        assert leave.method == "group_leave" and leave.request.member_epoch == -2  # type: ignore[attr-defined]
        assert leave.request.member_id == "m-1" and leave.request.instance_id == "i-1"  # type: ignore[attr-defined]
        assert end.answer(False) is None and member.machine.state is WorkerState.DOWN  # refused: logged, stopped


def a_join_whose_answer_was_lost_is_tried_again_under_the_member_id_it_made(clock: Clock) -> None:
    """The coordinator may have taken the first join (its answer lost): the retry must be that member, not
    a second one refused UNRELEASED_INSTANCE_ID by the first (Kafka's client makes its id, KIP-1082)."""
    member = ConsumerMember(config(instance_id="i-1"), monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    first = walk.to_call().request.member_id  # type: ignore[attr-defined]
    walk.fail(errors.CoordinatorNotAvailableError("deadline exceeded"))
    again = walk.to_call()
    assert first.startswith("i-1-") and again.request.member_id == first  # type: ignore[attr-defined]
    assert again.request.member_epoch == 0 and again.request.instance_id == "i-1"  # type: ignore[attr-defined]


def a_static_member_closed_before_its_first_join_was_answered_leaves_under_the_id_it_joined_with(
        clock: Clock) -> None:
    """SIGTERM while the first join is on its way: the coordinator may have stepped it (the instance is then
    held by a live member), so the member leaves with -2 under the id that join carried; the next process
    replaces it (found restarting the downtime bench's static consumer workers at once, 1 run in 26)."""
    member = ConsumerMember(config(instance_id="i-1"), monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    join = walk.to_call()
    member.closing = True  # the driver aborts the call in flight
    assert walk.fail(WorkerClosedError("closed during a request")) is None
    end = Walk(member, member.shutdown())
    leave = end.to_call()
    assert leave.method == "group_leave" and leave.request.member_epoch == -2  # type: ignore[attr-defined]
    assert leave.request.member_id == join.request.member_id  # type: ignore[attr-defined]
    assert leave.request.instance_id == "i-1"  # type: ignore[attr-defined]
    assert end.answer(True) is None and member.machine.state is WorkerState.DOWN


def a_member_cut_off_stops_its_tasks_within_its_rebalance_timeout_when_shorter(clock: Clock) -> None:
    """Rebalance timeout 3 s < session 10 s: the coordinator hands on tasks it asked this member to give up
    3 s after the heartbeat that asked (``c-revoke``), and that answer may be the one that never came. The
    member counts from the send of its last answered heartbeat, which the coordinator received after: it
    must have stopped everything before 3 s have passed since then."""
    walk = running_member(clock, session_timeout_ms=10_000, rebalance_timeout_ms=3_000)
    last_answered = clock.now  # running_member's ack, answered at once
    while not (isinstance(walk.effect, Deliver) and walk.effect.notice.kind == "lost"):
        assert clock.now - last_answered < 3.0, "still running its tasks when the coordinator hands them on"
        if isinstance(walk.effect, Sleep):
            clock.now += walk.effect.seconds
            walk.answer()
        else:
            assert isinstance(walk.effect, Call)
            clock.now += walk.effect.timeout  # cut off: every call times out
            walk.fail(errors.CoordinatorNotAvailableError("deadline exceeded"))
    assert 2.0 <= clock.now - last_answered < 3.0 and walk.member.tasks.assigned == ()


def a_listener_that_hangs_makes_the_member_leave_and_join_as_a_new_one(clock: Clock) -> None:
    walk = running_member(clock)
    walk.to_call()
    walk.answer(answer(1, (TaskReplica("a"),)))
    leave = walk.answer(False)  # on_revoked hung past the rebalance timeout
    assert isinstance(leave, Call) and leave.method == "group_leave"
    walk.answer(True)
    join = walk.to_call()
    assert join.request.member_id not in ("", "m-1") and join.request.member_epoch == 0  # type: ignore[attr-defined]
    assert walk.member.tasks.assigned == ()


def news_heard_while_joining_is_answered_at_once_after_the_join(clock: Clock) -> None:
    """The coordinator tells a newcomer its first target as soon as it lands, which may be before the
    driver has taken the join's answer (the member still Joining): the heartbeat goes at once all the
    same, not an interval later."""
    for told in (False, True):
        member = ConsumerMember(config(), monotonic=clock)
        member.machine.fire("start")
        walk = Walk(member, member.run())
        walk.to_call()
        if told:
            assert not member.hear(Nudge(NudgeKind.HEARTBEAT))  # joining: no wait to cut short
        walk.answer(answer(1, ()))
        while not isinstance(walk.effect, Call | Sleep):
            walk.answer(True if isinstance(walk.effect, Deliver) else None)
        if not told:
            assert walk.effect == Sleep(0.5, heartbeat=True)  # nothing to say: the interval
            continue
        beat = walk.effect
        assert isinstance(beat, Call) and beat.request.member_epoch == 1  # type: ignore[attr-defined]
        walk.answer(answer(2))
        assert walk.effect == Sleep(0.5, heartbeat=True)  # told once: the next one at the interval


def a_rebalance_request_changes_nothing(clock: Clock) -> None:
    walk = running_member(clock)
    walk.member.rebalance_requested = True
    beat = walk.to_call()
    assert beat.request.member_epoch == 1 and not walk.member.rebalance_requested  # type: ignore[attr-defined]


CORE_ROWS: list[Callable[..., None]] = [
    a_join_has_epoch_0_and_everything_the_coordinator_keeps_but_owned,
    a_dynamic_join_names_no_instance_and_no_assignor,
    heartbeats_keep_the_coordinators_interval_and_send_owned_only_when_it_changed,
    a_task_leaving_is_revoked_before_the_release_is_reported,
    the_same_assignment_again_tells_the_listener_nothing,
    fenced_loses_everything_and_joins_again_with_epoch_0,
    an_unknown_member_does_the_same,
    an_unanswered_heartbeat_keeps_the_tasks_until_a_session_passes,
    an_unreachable_coordinator_is_tried_again_within_a_heartbeat_interval,
    closing_revokes_then_leaves_with_minus_1,
    a_static_member_closing_leaves_for_a_while_with_minus_2,
    a_static_member_closing_mid_join_still_leaves_with_minus_2,
    a_join_whose_answer_was_lost_is_tried_again_under_the_member_id_it_made,
    a_static_member_closed_before_its_first_join_was_answered_leaves_under_the_id_it_joined_with,
    a_member_cut_off_stops_its_tasks_within_its_rebalance_timeout_when_shorter,
    a_listener_that_hangs_makes_the_member_leave_and_join_as_a_new_one,
    a_rebalance_request_changes_nothing,
    news_heard_while_joining_is_answered_at_once_after_the_join,
]


@pytest.mark.parametrize("row", CORE_ROWS, ids=lambda row: row.__name__)
def test_core_rule(row: Callable[[Clock], None]) -> None:
    row(Clock())


@pytest.mark.parametrize("error", [errors.UnreleasedInstanceIdError("instance i-1 is held by live member m-0"),
                                   errors.UnsupportedAssignorError("no assignor named 'nope'"),
                                   errors.InconsistentGroupProtocolError("group g runs the classic protocol")],
                         ids=lambda e: type(e).__name__)
def test_core_rule_a_refused_join_stops(error: errors.GroupCoordError) -> None:
    a_refused_join_stops_with_the_coordinators_message(Clock(), error)


# ------------------------------------------------------------------ through both drivers, a real coordinator


@pytest.fixture
def consumer_server() -> Iterator[ServerThread]:
    settings = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                                 consumer_heartbeat_interval_ms=100, consumer_assignment_interval_ms=20)
    with ServerThread(CoordinatorRuntime(settings, on_change=lambda group: group.validate())) as running:
        yield running


class Told:
    """A listener that writes down each notice."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[str, ...]]] = []
        self.lock = threading.Lock()

    def _note(self, kind: str, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            self.events.append((kind, tuple(sorted(str(t) for t in tasks))))

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self._note("assigned", tasks)

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self._note("revoked", tasks)

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self._note("lost", tasks)


def driven(driver: str, address: str, name: str, **overrides: Any) -> tuple[Driven, Told]:
    settings: dict[str, Any] = {"group_id": "g", "coordinators": (address,), "client_id": name, "protocol": "consumer",
                                "session_timeout_ms": 6000, "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000,
                                "retry_backoff_ms": 20, "retry_backoff_max_ms": 200}
    settings.update(overrides)
    told = Told()
    return DRIVERS[driver](WorkerConfig(**settings), told), told


def close_once(*members: Driven | None) -> None:
    """Close each member not closed yet (a driver's ``close`` runs once)."""
    for member in members:
        if member is not None and not getattr(member, "closed_by_test", False):
            member.closed_by_test = True  # type: ignore[union-attr]
            member.close()


def running(tasks: int) -> Callable[[Any], bool]:
    return lambda c: c.state is WorkerState.STABLE and len(c.assigned_tasks) == tasks


def coordinator_two_members_share_and_a_leaver_hands_its_tasks_on(driver: str, server: ServerThread) -> None:
    AdminClient(server.address).put_tasks("g", ["t0", "t1", "t2", "t3"])
    a, a_told = driven(driver, server.address, "a")
    b, _ = driven(driver, server.address, "b")
    try:
        a.start()
        assert a.wait(running(4), 20)
        b.start()
        assert a.wait(running(2), 20) and b.wait(running(2), 20)
        assert not set(a.client.assigned_tasks) & set(b.client.assigned_tasks)
        moves = [(kind, tasks) for kind, tasks in a_told.events if tasks]  # the join's empty assignment aside
        assert moves == [("assigned", ("t0#0", "t1#0", "t2#0", "t3#0")),
                         ("revoked", tuple(sorted(str(t) for t in b.client.assigned_tasks)))]
        assert b.client.rebalance_protocol == "consumer" and b.client.generation > 0 and not b.client.is_leader
        close_once(a)
        assert b.wait(running(4), 20)
        assert a.client.state is WorkerState.DOWN and a.client.member_id == ""
    finally:
        close_once(a, b)


def coordinator_an_unknown_assignor_stops_the_worker_with_the_coordinators_message(driver: str,
                                                                                  server: ServerThread) -> None:
    a, _ = driven(driver, server.address, "a", server_assignor="no-such-assignor")
    try:
        a.start()
        assert a.wait(lambda c: c.fatal_error is not None, 20)
    finally:
        close_once(a)
    assert a.client.state is WorkerState.DOWN and isinstance(a.fatal_error, errors.UnsupportedAssignorError) and "no-such-assignor" in str(a.fatal_error)


def coordinator_a_second_live_instance_is_refused(driver: str, server: ServerThread) -> None:
    AdminClient(server.address).put_tasks("g", ["t0"])
    first, _ = driven(driver, server.address, "first", instance_id="i-1")
    second, told = driven(driver, server.address, "second", instance_id="i-1")
    try:
        first.start()
        assert first.wait(running(1), 20)
        second.start()
        assert second.wait(lambda c: c.fatal_error is not None, 20)
        assert isinstance(second.fatal_error, errors.UnreleasedInstanceIdError)
        assert "i-1" in str(second.fatal_error) and told.events == []
        assert first.client.state is WorkerState.STABLE and len(first.client.assigned_tasks) == 1
    finally:
        close_once(first, second)


def coordinator_a_static_member_away_gets_its_tasks_back(driver: str, server: ServerThread) -> None:
    AdminClient(server.address).put_tasks("g", ["t0", "t1", "t2", "t3"])
    steady, steady_told = driven(driver, server.address, "steady")
    away, _ = driven(driver, server.address, "away", instance_id="i-2")
    back: Driven | None = None
    try:
        steady.start()
        away.start()
        assert steady.wait(running(2), 20) and away.wait(running(2), 20)
        kept = set(away.client.assigned_tasks)
        seen = len(steady_told.events)
        close_once(away)  # static: -2, its tasks wait for it
        back, _ = driven(driver, server.address, "back", instance_id="i-2")
        back.start()
        assert back.wait(running(2), 20) and set(back.client.assigned_tasks) == kept
        assert steady_told.events[seen:] == []  # the steady member was never touched
    finally:
        close_once(steady, away, back)


DRIVER_ROWS = [
    coordinator_two_members_share_and_a_leaver_hands_its_tasks_on,
    coordinator_an_unknown_assignor_stops_the_worker_with_the_coordinators_message,
    coordinator_a_second_live_instance_is_refused,
    coordinator_a_static_member_away_gets_its_tasks_back,
]


@pytest.mark.parametrize("driver", sorted(DRIVERS))
@pytest.mark.parametrize("rule", DRIVER_ROWS, ids=lambda rule: rule.__name__.removeprefix("coordinator_"))
def test_driver_rule(rule: Callable[[str, ServerThread], None], driver: str, consumer_server: ServerThread) -> None:
    rule(driver, consumer_server)


# ------------------------------------------------------------------ bad settings


def test_an_unknown_protocol_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="protocol must be one of 'classic', 'consumer', not 'kip848'"):
        config(protocol="kip848")


def test_an_unknown_protocol_on_the_command_line_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _outcome(capsys, "worker", "--group", "g", "--coordinator", "127.0.0.1:9400", "--protocol", "kip848")
    assert status == 2 and err.strip() == ("groupcoord worker: protocol must be one of 'classic', 'consumer', "
                                           "not 'kip848'")
