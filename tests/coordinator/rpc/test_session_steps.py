"""A Session stream steps its requests from its reader, with no task each (``session_twins.step_on_loop``): a
rebalance of N members is 2N requests in a burst, and a task per request was a fifth of the coordinator's CPU
per member. Only a request whose twin checks something off the loop first (a leader's large assignment) runs
the twin's coroutine; a step that fails is answered and the stream goes on; an answer for a stream that ended
goes nowhere."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.coordinator.rpc.session_client import RawSession
from tests.coordinator.rpc.test_session_batch import READS_BATCHES, held
from tests.coordinator.rpc.test_session_stream import Coordinator, join_request, serving


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    """Joins wait 3 s on the clock for more members: a test forms its group in one go."""
    with serving(initial_rebalance_delay_ms=3_000) as coordinator:
        yield coordinator


def count_tasks(coordinator: Coordinator) -> Counter[str]:
    """The tasks the server's loop creates from now on, by their coroutine's name."""
    made: Counter[str] = Counter()

    def install() -> None:
        loop = asyncio.get_running_loop()

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            made[getattr(coro, "__qualname__", "?")] += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(factory)  # type: ignore[arg-type]

    coordinator.server.call(install)
    return made


def form(coordinator: Coordinator, session: RawSession, count: int, *, tasks: int = 1) -> list[Any]:
    """``count`` members of group g on ``session``, joined and synced (the leader gives tasks t0, t1, ... to its
    first member); the SyncGroup answers."""
    firsts = [session.answer(tag) for tag in session.send_batch([("join_group", join_request("g"))] * count)]
    joins = session.send_batch([("join_group", join_request("g", f.member_id)) for f in firsts])
    held(coordinator, count)
    coordinator.advance(3.5)  # the initial delay, and once more for the members that came during it
    coordinator.advance(3.5)
    joined = [session.answer(tag) for tag in joins]
    assert {j.generation for j in joined} == {1}
    leader = next(j for j in joined if j.leader_id == j.member_id)
    given = [pb.MemberAssignment(member_id=m.member_id, tasks=[
        pb.TaskReplica(task_id=f"t{t}") for t in range(tasks)] if n == 0 else [])
        for n, m in enumerate(leader.members)]
    syncs = session.send_batch([("sync_group", pb.SyncGroupRequest(
        group_id="g", member_id=j.member_id, generation=1, protocol_type="svc", protocol_name="round-robin",
        assignments=given if j is leader else [])) for j in joined])
    return [session.answer(tag) for tag in syncs]


def test_joins_and_syncs_held_by_the_model_take_no_task_each(coordinator: Coordinator) -> None:
    admin = pb_grpc.GroupAdminStub(coordinator.channel)
    assert admin.PutTasks(pb.PutTasksRequest(group_id="g", tasks=[pb.Task(task_id="t0")]), timeout=10).error.code == 0
    session = RawSession(coordinator.channel, READS_BATCHES)
    made = count_tasks(coordinator)
    synced = form(coordinator, session, 5)
    assert [s.error.code for s in synced] == [pb.NONE] * 5
    assert sorted(len(s.tasks) for s in synced) == [0, 0, 0, 0, 1]
    assert made["SessionStream._handle"] == 0, made  # 15 requests, every one stepped from the reader
    session.close()


def test_a_leaders_large_assignment_is_still_checked_off_the_loop(coordinator: Coordinator) -> None:
    admin = pb_grpc.GroupAdminStub(coordinator.channel)
    assert admin.PutTasks(pb.PutTasksRequest(group_id="g", tasks=[pb.Task(task_id=f"t{t}") for t in range(1_000)]),
                          timeout=10).error.code == pb.NONE
    session = RawSession(coordinator.channel, READS_BATCHES)
    made = count_tasks(coordinator)
    synced = form(coordinator, session, 2, tasks=1_000)
    assert [s.error.code for s in synced] == [pb.NONE] * 2
    assert sorted(len(s.tasks) for s in synced) == [0, 1_000]
    assert made["SessionStream._handle"] == 1, made  # the leader's SyncGroup alone, through its twin
    session.close()


def test_a_step_that_fails_is_answered_and_the_stream_goes_on(coordinator: Coordinator,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = coordinator.server.runtime.model

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the model")

    monkeypatch.setattr(model, "join", broken)
    session = RawSession(coordinator.channel, READS_BATCHES)
    failed = session.ask("join_group", join_request("g"))
    assert failed.error.code == pb.COORDINATOR_NOT_AVAILABLE
    assert "JoinGroup: internal error" in failed.error.message
    monkeypatch.undo()
    assert session.ask("join_group", join_request("g")).error.code == pb.MEMBER_ID_REQUIRED  # it goes on
    session.close()


def test_an_answer_for_a_stream_that_ended_goes_nowhere(coordinator: Coordinator) -> None:
    coordinator.catalog("g")
    gone, staying = RawSession(coordinator.channel, READS_BATCHES), RawSession(coordinator.channel, READS_BATCHES)
    first_gone = gone.ask("join_group", join_request("g"))
    first_staying = staying.ask("join_group", join_request("g"))
    gone.send("join_group", join_request("g", first_gone.member_id))  # held: its stream ends before the answer
    tag = staying.send("join_group", join_request("g", first_staying.member_id))
    held(coordinator, 2)
    gone.cancel()
    sessions = coordinator.server.sessions
    for _ in range(1_000):
        if coordinator.server.call(lambda: len(sessions.streams)) == 1:
            break
        asyncio.run(asyncio.sleep(0.01))
    assert coordinator.server.call(lambda: len(sessions.streams)) == 1, "the cancelled stream never closed"
    coordinator.advance(3.5)  # the phase ends: both held joins are answered, one to a stream that is gone
    coordinator.advance(3.5)
    joined = staying.answer(tag)
    assert joined.error.code == pb.NONE and joined.generation == 1 and len(joined.members) in (0, 2)
    assert coordinator.server.call(sessions.members) == 1  # the ended stream's member is not carried again
    beat = staying.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=joined.member_id, generation=1))
    assert beat.error.code in (pb.NONE, pb.REBALANCE_IN_PROGRESS)  # the coordinator goes on
    for _ in range(1_000):  # nothing queued for the stream that ended (the gauge counts every stream's queue)
        if coordinator.server.call(lambda: sessions.figures.buffered_bytes) == 0:
            break
        asyncio.run(asyncio.sleep(0.01))
    assert coordinator.server.call(lambda: sessions.figures.buffered_bytes) == 0
    staying.close()


def hold_large_parses_until_in_flight(coordinator: Coordinator, count: int) -> None:
    """A large request's parse off the loop ends only once its stream has ``count`` requests in flight (or 10 s)."""
    router, sessions = coordinator.server.router, coordinator.server.sessions
    parse = router.checkers.run

    async def held_parse(check: Any, *args: Any) -> Any:
        for _ in range(1_000):
            if any(stream.in_flight >= count for stream in sessions.streams):  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.01)
        return await parse(check, *args)

    coordinator.server.call(lambda: setattr(router.checkers, "run", held_parse))


def test_syncs_read_behind_a_large_one_of_their_group_step_after_it_with_no_task_each(coordinator: Coordinator) -> None:
    """A leader's SyncGroup of 256 KiB or more is parsed off the loop; its followers' SyncGroups read behind it on
    the same stream wait for it, then step from the loop in the order read: no task each (with 10,000 members,
    a task each was a tenth of the coordinator's CPU in the rebalance)."""
    session = RawSession(coordinator.channel, READS_BATCHES)
    firsts = [session.answer(tag) for tag in session.send_batch([("join_group", join_request("g"))] * 4)]
    joins = session.send_batch([("join_group", join_request("g", f.member_id)) for f in firsts])
    held(coordinator, 4)
    coordinator.advance(3.5)
    coordinator.advance(3.5)
    joined = [session.answer(tag) for tag in joins]
    leader = next(j for j in joined if j.leader_id == j.member_id)
    given = [pb.MemberAssignment(member_id=m.member_id, user_data=b"u" * (300_000 if m.member_id == leader.member_id
                                                                         else 0)) for m in leader.members]
    made = count_tasks(coordinator)
    hold_large_parses_until_in_flight(coordinator, 4)  # the followers are read while the leader's is parsed
    large = session.send("sync_group", pb.SyncGroupRequest(group_id="g", member_id=leader.member_id, generation=1,
                                                           assignments=given))
    followers = session.send_batch([("sync_group", pb.SyncGroupRequest(
        group_id="g", member_id=j.member_id, generation=1)) for j in joined if j is not leader])
    synced = [session.answer(tag) for tag in (large, *followers)]
    assert [s.error.code for s in synced] == [pb.NONE] * 4
    assert [len(s.user_data) for s in synced] == [300_000, 0, 0, 0]
    assert made["SessionStream._parse_large"] == 1, made
    assert made["SessionStream._handle"] == 1, made  # the leader's, through its twin; its followers' none
    session.close()
