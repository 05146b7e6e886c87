"""The member's rules as one scenario table: the pure rules fed to the core (``worker.member``) directly,
the rules that need a coordinator run through BOTH drivers (``WorkerClient``, ``AsyncWorkerClient``)
against a real gRPC coordinator on loopback.

Core rows walk ``Member.run()`` with a fake clock: each effect the core yields is answered by the row (a
call's answer, or the error thrown in), exactly as a driver would. Driver rows go through
``tests/worker/member_drivers.py``, which runs either client behind the same small face.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica
from groupcoord.assignors.registry import get_assignor
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.wire import replicas_to_pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import AskLoad, Call, Deliver, Effect, Joined, Sleep, WorkerClosedError, advance
from groupcoord.worker.member import Member
from groupcoord.worker.states import WorkerState
from tests.worker.member_drivers import DRIVERS, Driven

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


def _beats(walk: Walk, clock: Clock, seconds: int) -> Effect | None:
    """``seconds`` of heartbeats a second apart, each answered; the effect after the last one."""
    for _ in range(seconds):
        clock.now += 1
        assert isinstance(walk.answer(), Call)  # the sleep; the heartbeat goes out
        after = walk.answer()  # answered
    return after


def the_leader_rechecks_on_the_newest_snapshot_and_skips_an_unreachable_coordinator(clock: Clock) -> None:
    assignor = Rechecking([True])
    walk = stable_member(clock, leader=True, lookup=lambda name: assignor, load_reports=False)
    walk.answer()
    assert isinstance(walk.answer(), Sleep)  # heartbeat answered; the interval starts: no describe yet
    describe = _beats(walk, clock, 10)
    assert isinstance(describe, Call) and describe.method == "describe_group"
    assert isinstance(walk.fail(errors.CoordinatorNotAvailableError("timed out")), Sleep)  # skipped
    assert walk.member.machine.state is WorkerState.STABLE
    _beats(walk, clock, 10)
    walk.answer(pb.DescribeGroupResponse(group_id="g", generation=1))
    assert walk.member.machine.state is WorkerState.PREPARING_JOIN  # the assignor would move tasks: re-join


def unanswered_heartbeats_keep_the_tasks_until_a_session_less_the_margin_passes(clock: Clock) -> None:
    """6 s session, 1 s margin: the tasks run 5 s past the last answered heartbeat, not a moment longer,
    eager or cooperative (pushed news lets the others take them within a round trip of the removal)."""
    walk = stable_member(clock, rebalance_protocol="cooperative")
    walk.answer()
    nap = walk.fail(errors.CoordinatorNotAvailableError("refused"))
    assert isinstance(nap, Sleep) and nap.seconds == pytest.approx(0.1)  # the next one sooner, elsewhere
    assert walk.member.machine.state is WorkerState.STABLE and walk.member.tasks.assigned == T
    clock.now += 4.0
    beat = walk.answer()
    assert isinstance(beat, Call) and beat.method == "heartbeat" and beat.timeout == pytest.approx(1.0)  # 1 s left
    nap = walk.fail(errors.CoordinatorNotAvailableError("timed out"))
    assert isinstance(nap, Sleep) and nap.seconds <= 1.0 and walk.member.tasks.assigned == T
    clock.now += 1.0
    lost = walk.answer()
    assert isinstance(lost, Deliver) and lost.notice.kind == "lost"
    join = walk.answer(True)
    assert isinstance(join, Call) and join.method == "join_group"  # cooperative: no revoke, straight to JoinGroup
    assert walk.member.machine.state is WorkerState.JOINING and not walk.member.tasks.assigned


def an_eager_member_stops_its_tasks_when_heartbeats_go_unanswered(clock: Clock) -> None:
    walk = stable_member(clock)
    walk.answer()
    walk.fail(errors.CoordinatorNotAvailableError("refused"))
    clock.now += 5.0
    lost = walk.answer()
    assert isinstance(lost, Deliver) and lost.notice.kind == "lost" and lost.notice.tasks == T


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


def an_unreachable_coordinator_is_tried_again_within_a_heartbeat_interval(clock: Clock) -> None:
    """A long coordinator restart: the member loses its tasks at the session less the margin and joins; its
    attempts never wait longer than a heartbeat interval (1 s here, the backoff's maximum 10 s), so it is
    heard from within the session the coordinator restarts when it is back. A refused assignment still
    backs off in full."""
    walk = stable_member(clock, retry_backoff_max_ms=10_000)
    walk.answer()
    walk.fail(errors.CoordinatorNotAvailableError("refused"))
    clock.now += 5.0
    assert isinstance(walk.answer(), Deliver)  # lost
    waits = []
    for _ in range(12):  # 12 refused JoinGroups: the bare backoff would reach 10 s by the 8th
        walk.to_call("join_group")
        nap = walk.fail(errors.CoordinatorNotAvailableError("connection refused"))
        assert isinstance(nap, Sleep)
        waits.append(nap.seconds)
        clock.now += nap.seconds
    assert max(waits) == pytest.approx(1.0) and waits[0] < 0.3  # doubling from 0.1 s, then the interval
    walk.to_call("join_group")
    nap = walk.fail(errors.InvalidAssignmentError("the leader's assignor failed"))
    assert isinstance(nap, Sleep) and nap.seconds == pytest.approx(10.0)  # attempt 13: the full backoff


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
    unanswered_heartbeats_keep_the_tasks_until_a_session_less_the_margin_passes,
    an_eager_member_stops_its_tasks_when_heartbeats_go_unanswered,
    an_unknown_member_resets_and_joins_as_a_new_one,
    a_listener_that_hangs_makes_the_member_leave,
    a_cooperative_member_gives_up_an_unanswered_join_in_time,
    a_refused_assignment_backs_off_before_the_next_join,
    an_unreachable_coordinator_is_tried_again_within_a_heartbeat_interval,
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


# ------------------------------------------------------------------ the rows that need a coordinator, through both drivers


class Told:
    """A listener that writes down each notice with the client's state and fatal error at that moment."""

    def __init__(self) -> None:
        self.driven: Driven | None = None
        self.events: list[tuple[str, tuple[str, ...], str, str]] = []
        self.lock = threading.Lock()

    def _note(self, kind: str, tasks: Sequence[TaskReplica]) -> None:
        driven = self.driven
        assert driven is not None
        fatal = driven.fatal_error
        with self.lock:
            self.events.append((kind, tuple(sorted(str(t) for t in tasks)), driven.client.state.value,
                                type(fatal).__name__ if fatal is not None else ""))

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self._note("assigned", tasks)

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self._note("revoked", tasks)

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self._note("lost", tasks)


def driven_worker(driver: str, address: str, **overrides: Any) -> tuple[Driven, Told]:
    settings: dict[str, Any] = {"group_id": "g", "coordinators": (address,), "client_id": "w",
                                "session_timeout_ms": 6000, "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000,
                                "retry_backoff_ms": 20, "retry_backoff_max_ms": 200}
    settings.update(overrides)
    told = Told()
    driven = DRIVERS[driver](WorkerConfig(**settings), told)
    told.driven = driven
    return driven, told


def stable(driven: Driven, timeout: float = 20) -> None:
    assert driven.wait(lambda c: c.state is WorkerState.STABLE, timeout), f"not Stable: {driven.client.state}"


def joined_by_hand(address: str, **fields: Any) -> Any:
    """A second member joining on a raw stub: MEMBER_ID_REQUIRED, then its JoinGroup held by the rebalance."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.GroupCoordinatorStub(channel)
    request = pb.JoinGroupRequest(group_id="g", client_id="by-hand", session_timeout_ms=6000, rebalance_timeout_ms=5000,
                                  protocols=["round-robin"], rebalance_protocols=["eager"], **fields)
    first = stub.JoinGroup(request, timeout=10)
    if first.error.code == pb.MEMBER_ID_REQUIRED:
        request.member_id = first.member_id
        return channel, stub.JoinGroup.future(request, timeout=10)
    return channel, first


def coordinator_rebalance_in_progress_restarts_the_session_from_the_send(driver: str, server: ServerThread) -> None:
    # unary: on a stream the member hears of the rebalance and joins at once, with no heartbeat to refuse
    driven, _ = driven_worker(driver, server.address, session_stream=False)
    seen: list[tuple[float, float]] = []
    try:
        driven.start()
        stable(driven)
        session = driven.member.session
        answered = session.heartbeat_failed

        def spy(failure: errors.GroupCoordError, sent: float | None = None) -> Any:
            before = session.last_heartbeat_ok
            verdict = answered(failure, sent)
            if isinstance(failure, errors.RebalanceInProgressError):
                seen.append((before, session.last_heartbeat_ok))
            return verdict

        session.heartbeat_failed = spy  # type: ignore[method-assign]
        channel, _ = joined_by_hand(server.address)
        try:
            assert driven.wait(lambda c: bool(seen), 20), "no heartbeat was answered REBALANCE_IN_PROGRESS"
        finally:
            channel.close()
    finally:
        driven.close()
    before, after = seen[0]
    assert after > before  # the clock restarted at the refused heartbeat's send, not left at the last answered one


def coordinator_a_fenced_member_loses_its_tasks_before_it_stops(driver: str, server: ServerThread) -> None:
    AdminClient(server.address).put_tasks("g", ["t0", "t1"])
    driven, told = driven_worker(driver, server.address, instance_id="i-1")
    try:
        driven.start()
        stable(driven)
        assert driven.wait(lambda c: len(c.assigned_tasks) == 2, 10)
        channel, _ = joined_by_hand(server.address, instance_id="i-1")  # another process is i-1 now
        channel.close()
        assert driven.wait(lambda c: c.state is WorkerState.DOWN, 20)
    finally:
        driven.close()
    assert isinstance(driven.fatal_error, errors.FencedInstanceIdError)
    tasks = ("t0#0", "t1#0")
    assert told.events == [("assigned", tasks, "Stable", ""), ("lost", tasks, "Stable", "FencedInstanceIdError")]


def coordinator_removed_member_joins_again_as_a_new_one(driver: str, server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks("g", ["t0"])
    driven, told = driven_worker(driver, server.address)
    try:
        driven.start()
        stable(driven)
        first = driven.client.member_id
        admin.remove_members("g", member_ids=[first])
        assert driven.wait(lambda c: c.state is WorkerState.STABLE and c.member_id not in ("", first), 20)
        assert [kind for kind, *_ in told.events] == ["assigned", "revoked", "assigned"]
    finally:
        driven.close()


def coordinator_close_leaves_and_the_group_rebalances_at_once(driver: str, server: ServerThread) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks("g", ["t0"])
    driven, told = driven_worker(driver, server.address, session_timeout_ms=60_000)
    driven.start()
    stable(driven)
    assert driven.wait(lambda c: len(c.assigned_tasks) == 1, 10)
    assert len(admin.describe_group("g").members) == 1
    driven.close()
    assert not admin.describe_group("g").members  # gone now, not after its 60 s session
    assert driven.client.state is WorkerState.DOWN
    assert told.events == [("assigned", ("t0#0",), "Stable", ""), ("revoked", ("t0#0",), "Stable", "")]


DRIVER_ROWS = [
    coordinator_rebalance_in_progress_restarts_the_session_from_the_send,
    coordinator_a_fenced_member_loses_its_tasks_before_it_stops,
    coordinator_removed_member_joins_again_as_a_new_one,
    coordinator_close_leaves_and_the_group_rebalances_at_once,
]


@pytest.mark.parametrize("driver", sorted(DRIVERS))
@pytest.mark.parametrize("rule", DRIVER_ROWS, ids=lambda rule: rule.__name__.removeprefix("coordinator_"))
def test_driver_rule(rule: Callable[[str, ServerThread], None], driver: str, server: ServerThread) -> None:
    rule(driver, server)
