"""The member's rules as one scenario table: the pure rules fed to the core (``worker.member``) directly,
the rules that need a coordinator run through BOTH drivers (``WorkerClient``, ``AsyncWorkerClient``)
against a real gRPC coordinator on loopback.

Core rows walk ``Member.run()`` with a fake clock: each effect the core yields is answered by the row (a
call's answer, or the error thrown in), exactly as a driver would. Driver rows go through
``tests/worker/member_drivers.py``, which runs either client behind the same small face.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from groupcoord import errors
from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica
from groupcoord.assignors.registry import get_assignor
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import replicas_to_pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import AskLoad, Call, Deliver, Effect, Joined, Sleep, WorkerClosedError, advance
from groupcoord.worker.member import Member
from groupcoord.worker.states import WorkerState

T = (TaskReplica("a"), TaskReplica("b"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Walk:
    """A member's steps walked by hand: ``effect`` is what the core asks for now."""

    def __init__(self, member: Member, steps: Any) -> None:
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

    def to_call(self, method: str) -> Call:
        """Answer sleeps, listener calls (returned in time) and ``on_joined`` until the core asks for ``method``."""
        while not (isinstance(self.effect, Call) and self.effect.method == method):
            assert self.effect is not None and not isinstance(self.effect, Call), f"wanted {method}, got {self.effect}"
            self.answer(True if isinstance(self.effect, Deliver) else None)
        return self.effect

    def notices(self) -> list[tuple[str, tuple[TaskReplica, ...]]]:
        return [(e.notice.kind, e.notice.tasks) for e in self.seen if isinstance(e, Deliver)]


def config(**overrides: Any) -> WorkerConfig:
    settings: dict[str, Any] = {"group_id": "g", "coordinators": ("127.0.0.1:1",), "client_id": "w",
                                "session_timeout_ms": 6000, "heartbeat_interval_ms": 1000,
                                "retry_backoff_ms": 100, "retry_backoff_max_ms": 1000}
    settings.update(overrides)
    return WorkerConfig(**settings)


def stable_member(clock: Clock, *, leader: bool = False, lookup: Callable[[str], Any] = get_assignor,
                  load_reports: bool = True, **overrides: Any) -> Walk:
    """A member walked to Stable in generation 1 with tasks ``T``, its next effect the heartbeat's sleep."""
    member = Member(config(**overrides), assignor_lookup=lookup, monotonic=clock, load_reports=load_reports)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    walk.to_call("join_group")
    cooperative = member.config.rebalance_protocol
    walk.answer(pb.JoinGroupResponse(member_id="m-1", generation=1, leader_id="m-1" if leader else "m-0",
                                     protocol="round-robin", rebalance_protocol=cooperative))
    walk.to_call("sync_group")
    walk.answer(pb.SyncGroupResponse(tasks=replicas_to_pb(T)))
    walk.answer(True)  # on_assigned
    assert member.machine.state is WorkerState.STABLE and isinstance(walk.effect, Sleep) and walk.effect.heartbeat
    return walk


# ------------------------------------------------------------------ the pure rows (the core fed directly)


def member_id_required_joins_again_at_once_with_the_given_id(clock: Clock) -> None:
    member = Member(config(), assignor_lookup=get_assignor, monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    first = walk.to_call("join_group")
    assert first.request.member_id == ""  # type: ignore[attr-defined]
    again = walk.fail(errors.MemberIdRequiredError("give one", member_id="m-7"))
    assert isinstance(again, Call) and again.method == "join_group"  # no sleep, no fail transition between
    assert again.request.member_id == "m-7"  # type: ignore[attr-defined]
    assert member.machine.state is WorkerState.JOINING


def rebalance_in_progress_restarts_the_session_from_when_the_heartbeat_was_sent(clock: Clock) -> None:
    walk = stable_member(clock, rebalance_protocol="cooperative")
    clock.now += 1
    sent = clock.now
    walk.answer()  # the sleep: the heartbeat goes out now
    clock.now += 2.5  # answered late
    walk.fail(errors.RebalanceInProgressError("rebalancing"))
    assert walk.member.session.last_heartbeat_ok == sent
    assert isinstance(walk.effect, Call) and walk.effect.method == "join_group"  # cooperative: re-joins at once
    assert walk.member.tasks.assigned == T


def a_fenced_heartbeat_loses_the_tasks_then_stops_without_leaving(clock: Clock) -> None:
    walk = stable_member(clock, instance_id="i-1")
    walk.answer()
    assert walk.fail(errors.FencedInstanceIdError("another process is i-1")) is None  # run() ends
    member = walk.member
    assert isinstance(member.fatal_error, errors.FencedInstanceIdError)
    end = Walk(member, member.shutdown())
    assert isinstance(end.effect, Deliver) and end.effect.notice.kind == "lost" and end.effect.notice.tasks == T
    assert member.machine.state is WorkerState.STABLE  # lost before the stop
    assert end.answer(True) is None  # no LeaveGroup: the place is not ours to leave
    assert member.machine.state is WorkerState.DOWN


def a_close_during_a_load_report_ends_the_loop_in_both_clients(clock: Clock) -> None:
    walk = stable_member(clock)
    walk.answer()
    assert isinstance(walk.answer(), AskLoad)  # the heartbeat answered: the service's report is asked for
    call = walk.answer(pb.LoadReport())
    assert isinstance(call, Call) and call.method == "report_load"
    assert walk.fail(WorkerClosedError("closed during a request")) is None
    assert walk.member.fatal_error is None


def a_load_report_the_coordinator_refuses_is_logged_and_skipped(clock: Clock) -> None:
    walk = stable_member(clock)
    walk.answer()
    walk.answer()
    walk.answer(pb.LoadReport())
    assert isinstance(walk.fail(errors.CoordinatorNotAvailableError("down")), Sleep)
    assert walk.member.machine.state is WorkerState.STABLE


class Rechecking:
    """An assignor with the RebalanceCheck hook: asked every 10 s, answers from ``answers``."""

    name = "round-robin"
    recheck_interval_s = 10.0

    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    def assign(self, context: AssignmentContext) -> Assignment:
        return get_assignor("round-robin").assign(context)

    def needs_rebalance(self, context: AssignmentContext) -> bool:
        return self.answers.pop(0)


def the_leader_rechecks_on_the_newest_snapshot_and_skips_an_unreachable_coordinator(clock: Clock) -> None:
    assignor = Rechecking([True])
    walk = stable_member(clock, leader=True, lookup=lambda name: assignor, load_reports=False)
    walk.answer()
    assert isinstance(walk.answer(), Sleep)  # heartbeat answered; the interval starts: no describe yet
    clock.now += 10
    walk.answer()
    describe = walk.answer()
    assert isinstance(describe, Call) and describe.method == "describe_group"
    assert isinstance(walk.fail(errors.CoordinatorNotAvailableError("timed out")), Sleep)  # skipped
    assert walk.member.machine.state is WorkerState.STABLE
    clock.now += 10
    walk.answer()
    walk.answer()
    walk.answer(pb.DescribeGroupResponse(group_id="g", generation=1))
    assert walk.member.machine.state is WorkerState.PREPARING_JOIN  # the assignor would move tasks: re-join


def an_unanswered_heartbeat_keeps_the_tasks_until_a_session_passes(clock: Clock) -> None:
    walk = stable_member(clock, rebalance_protocol="cooperative")
    walk.answer()
    nap = walk.fail(errors.CoordinatorNotAvailableError("refused"))
    assert isinstance(nap, Sleep) and nap.seconds == pytest.approx(0.1)  # the next one sooner, elsewhere
    assert walk.member.machine.state is WorkerState.STABLE and walk.member.tasks.assigned == T
    clock.now += 6.5
    walk.answer()
    lost = walk.fail(errors.CoordinatorNotAvailableError("refused"))
    assert isinstance(lost, Deliver) and lost.notice.kind == "lost"
    join = walk.answer(True)
    assert isinstance(join, Call) and join.method == "join_group"  # cooperative: no revoke, straight to JoinGroup
    assert walk.member.machine.state is WorkerState.JOINING and not walk.member.tasks.assigned


def an_unknown_member_resets_and_joins_as_a_new_one(clock: Clock) -> None:
    walk = stable_member(clock)
    walk.answer()
    walk.fail(errors.UnknownMemberIdError("who?"))
    join = walk.to_call("join_group")
    assert join.request.member_id == "" and walk.notices()[-1] == ("revoked", T)  # type: ignore[attr-defined]


def a_listener_that_hangs_makes_the_member_leave(clock: Clock) -> None:
    walk = stable_member(clock, rebalance_protocol="cooperative")
    walk.member.rebalance_requested = True
    walk.answer()
    walk.to_call("join_group")
    walk.answer(pb.JoinGroupResponse(member_id="m-1", generation=2, leader_id="m-0", protocol="round-robin"))
    walk.answer()  # on_joined; the group turned out eager: everything is revoked
    leave = walk.answer(False)  # the revoke hung past the rebalance timeout
    assert isinstance(leave, Call) and leave.method == "leave_group"
    walk.answer(True)
    assert walk.member.session.member_id == ""


def a_cooperative_member_gives_up_an_unanswered_join_in_time(clock: Clock) -> None:
    walk = stable_member(clock, rebalance_protocol="cooperative")
    walk.member.rebalance_requested = True
    walk.answer()
    join = walk.to_call("join_group")
    assert join.give_up_in == pytest.approx(5.0)  # the 6 s session less the margin (a heartbeat interval)
    notices = walk.member.give_up_unanswered()
    assert [(n.kind, n.tasks) for n in notices] == [("lost", T)] and not walk.member.tasks.assigned


def a_refused_assignment_backs_off_before_the_next_join(clock: Clock) -> None:
    member = Member(config(), assignor_lookup=get_assignor, monotonic=clock)
    member.machine.fire("start")
    walk = Walk(member, member.run())
    walk.to_call("join_group")
    nap = walk.fail(errors.InvalidAssignmentError("the leader's assignor failed"))
    assert isinstance(nap, Sleep) and 0.1 <= nap.seconds <= 0.2
    assert member.machine.state is WorkerState.PREPARING_JOIN


def an_eager_member_revokes_before_it_joins_again(clock: Clock) -> None:
    walk = stable_member(clock)
    walk.member.rebalance_requested = True
    walk.answer()
    walk.to_call("join_group")
    assert walk.notices() == [("assigned", T), ("revoked", T)]
    assert not any(isinstance(e, Call) and e.method == "heartbeat" for e in walk.seen)  # asked: no heartbeat


def closing_revokes_and_leaves(clock: Clock) -> None:
    walk = stable_member(clock)
    walk.member.closing = True
    assert walk.answer() is None
    end = Walk(walk.member, walk.member.shutdown())
    assert isinstance(end.effect, Deliver) and end.effect.notice.kind == "revoked"
    leave = end.answer(True)
    assert isinstance(leave, Call) and leave.method == "leave_group"
    assert end.answer(True) is None and walk.member.machine.state is WorkerState.DOWN


@dataclass(frozen=True)
class Row:
    rule: Callable[[Clock], None]


CORE_ROWS = [Row(rule) for rule in (
    member_id_required_joins_again_at_once_with_the_given_id,
    rebalance_in_progress_restarts_the_session_from_when_the_heartbeat_was_sent,
    a_fenced_heartbeat_loses_the_tasks_then_stops_without_leaving,
    a_close_during_a_load_report_ends_the_loop_in_both_clients,
    a_load_report_the_coordinator_refuses_is_logged_and_skipped,
    the_leader_rechecks_on_the_newest_snapshot_and_skips_an_unreachable_coordinator,
    an_unanswered_heartbeat_keeps_the_tasks_until_a_session_passes,
    an_unknown_member_resets_and_joins_as_a_new_one,
    a_listener_that_hangs_makes_the_member_leave,
    a_cooperative_member_gives_up_an_unanswered_join_in_time,
    a_refused_assignment_backs_off_before_the_next_join,
    an_eager_member_revokes_before_it_joins_again,
    closing_revokes_and_leaves,
)]


@pytest.mark.parametrize("row", CORE_ROWS, ids=lambda row: row.rule.__name__)
def test_core_rule(row: Row) -> None:
    row.rule(Clock())


def test_every_effect_kind_is_exercised_by_the_table() -> None:
    kinds: set[type] = set()
    for row in CORE_ROWS:
        original = Walk.answer

        def spy(self: Walk, value: Any = None, _original: Any = original) -> Effect | None:
            kinds.add(type(self.effect))
            result: Effect | None = _original(self, value)
            return result

        Walk.answer = spy  # type: ignore[method-assign]
        try:
            row.rule(Clock())
        finally:
            Walk.answer = original  # type: ignore[method-assign]
    assert kinds == {Call, Sleep, Deliver, Joined, AskLoad}
