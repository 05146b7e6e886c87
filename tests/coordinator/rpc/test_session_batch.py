"""Batches on the Session stream: several requests in one message, several answers and news in one, each as if
sent alone; only with a peer that said it reads them; a batch that breaks the rules ends the stream clearly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import pytest

from groupcoord.coordinator.rpc.session_envelope import BATCH_METADATA, MAX_BATCH
from groupcoord.coordinator.rpc.session_metrics import SessionFigures
from groupcoord.coordinator.rpc.session_outbox import BATCH_BYTES, SessionOutbox
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.rpc.session_client import RawSession
from tests.coordinator.rpc.test_session_stream import Coordinator, join_request, serving

READS_BATCHES = [(BATCH_METADATA, "1")]


def _frames(count: int, size: int = 10) -> list[bytes]:
    return [pb.SessionResponse(tag=n + 1, heartbeat=pb.HeartbeatResponse(
        error=pb.Error(message="x" * size))).SerializeToString() for n in range(count)]


def _written(frames: list[bytes], *, batches: bool, limit: int = 1 << 30) -> list[bytes]:
    """What an outbox writes for ``frames``, all queued before its writer runs."""
    written: list[bytes] = []

    async def run() -> None:
        async def write(data: bytes) -> None:
            written.append(data)

        outbox = SessionOutbox(limit, SessionFigures(), write, batches=batches)
        for data in frames:
            assert outbox.put(data)
        idle = asyncio.Event()
        writer = asyncio.create_task(outbox.run(idle.set))
        await asyncio.wait_for(idle.wait(), 5)
        writer.cancel()
        assert not outbox

    asyncio.run(run())
    return written


def test_what_waits_goes_out_as_one_batch_to_a_client_that_reads_them() -> None:
    frames = _frames(3)
    written = _written(frames, batches=True)
    assert len(written) == 1
    assert [m.SerializeToString() for m in pb.SessionResponse.FromString(written[0]).batch] == frames


def test_a_client_that_does_not_ask_gets_one_frame_a_message() -> None:
    frames = _frames(3)
    assert _written(frames, batches=False) == frames


def test_a_batch_closes_at_its_size_and_a_large_frame_goes_alone() -> None:
    small = _frames(40, size=BATCH_BYTES // 30)  # about 30 fit in one batch
    large = _frames(1, size=BATCH_BYTES + 10)
    written = _written(small + large + small[:2], batches=True)
    sizes = [len(pb.SessionResponse.FromString(m).batch) for m in written]
    assert sizes[:2] == [29, 11] and all(len(m) <= BATCH_BYTES + 2_000 for m in written[:2])
    assert written[2] == large[0]  # alone, not wrapped
    assert sizes[3] == 2
    assert sum(len(m) for m in written) >= sum(len(f) for f in small + large + small[:2])


def test_the_bound_counts_what_waits_behind_the_batch_being_written() -> None:
    async def run() -> None:
        release = asyncio.Event()

        async def write(data: bytes) -> None:
            await release.wait()  # a client that does not read

        outbox = SessionOutbox(200, SessionFigures(), write, batches=True)
        writer = asyncio.create_task(outbox.run(lambda: None))
        assert outbox.put(b"a" * 80) and outbox.put(b"b" * 80)
        assert not outbox.put(b"c" * 41)  # 201 would wait: refused (the stream is cut off)
        await asyncio.sleep(0)  # the writer takes both into one batch, and waits on the write
        assert outbox.waiting_with(b"c" * 200) == 200
        assert outbox.put(b"c" * 200)  # behind the batch being written: 200 wait, the bound
        assert not outbox.put(b"d")  # one more byte: refused
        writer.cancel()

    asyncio.run(run())


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    """Joins wait 3 s on the clock for more members (the group's first rebalance): a test forms its group in one go."""
    with serving(initial_rebalance_delay_ms=3_000) as coordinator:
        yield coordinator


def held(coordinator: Coordinator, count: int, timeout: float = 10.0) -> None:
    """Wait until ``count`` requests are held by the coordinator (joins waiting for the phase's end)."""
    runtime = coordinator.server.runtime
    deadline = time.monotonic() + timeout
    while coordinator.server.call(runtime.waiting) < count:
        assert time.monotonic() < deadline, f"fewer than {count} requests held within {timeout} s"
        time.sleep(0.01)


@pytest.fixture
def batched(coordinator: Coordinator) -> Iterator[RawSession]:
    session = RawSession(coordinator.channel, READS_BATCHES)
    yield session
    session.close()


def test_a_batch_of_requests_is_answered_each_under_its_tag(coordinator: Coordinator, batched: RawSession) -> None:
    assert batched.headers().get(BATCH_METADATA) == "1"  # the coordinator reads batches
    coordinator.catalog("g")
    tags = batched.send_batch([("join_group", join_request("g")), ("join_group", join_request("h")),
                               ("heartbeat", pb.HeartbeatRequest(group_id="g", member_id="nobody"))])
    first_g, first_h, beat = (batched.answer(tag) for tag in tags)
    assert first_g.error.code == first_h.error.code == pb.MEMBER_ID_REQUIRED
    assert beat.error.code == pb.UNKNOWN_MEMBER_ID
    # a member's requests in one batch reach the model in order: the join, then its heartbeat
    joined_tag, beat_tag = batched.send_batch([("join_group", join_request("h", first_h.member_id)),
                                               ("heartbeat", pb.HeartbeatRequest(
                                                   group_id="h", member_id=first_h.member_id, generation=0))])
    assert batched.answer(beat_tag).error.code == pb.REBALANCE_IN_PROGRESS  # a member: stepped after its join
    held(coordinator, 1)
    coordinator.advance(3.5)
    assert batched.answer(joined_tag).generation == 1


def test_news_to_many_members_goes_out_in_fewer_messages(coordinator: Coordinator, batched: RawSession) -> None:
    coordinator.catalog("g")
    firsts = [batched.answer(tag) for tag in batched.send_batch([("join_group", join_request("g"))] * 5)]
    joins = batched.send_batch([("join_group", join_request("g", first.member_id)) for first in firsts])
    held(coordinator, 5)
    coordinator.advance(3.5)  # the initial delay, and once more for the members that came during it
    coordinator.advance(3.5)
    joined = [batched.answer(tag) for tag in joins]
    assert {j.generation for j in joined} == {1}
    leader = next(j for j in joined if j.leader_id == j.member_id)
    given = [pb.MemberAssignment(member_id=m.member_id, tasks=[pb.TaskReplica(task_id="t1")] if n == 0 else [])
             for n, m in enumerate(leader.members)]
    syncs = batched.send_batch([("sync_group", pb.SyncGroupRequest(
        group_id="g", member_id=j.member_id, generation=j.generation, protocol_type="svc",
        protocol_name="round-robin", assignments=given if j is leader else [])) for j in joined])
    assert [batched.answer(tag).error.code for tag in syncs] == [pb.NONE] * 5
    read_before = batched.messages
    newcomer = batched.answer(batched.send("join_group", join_request("g")))
    batched.send("join_group", join_request("g", newcomer.member_id))  # held: the group rebalances
    told = batched.news(5)
    assert {n.member_id for n in told} == {j.member_id for j in joined}
    assert batched.messages - read_before < 1 + 5  # the newcomer's first answer, then news in fewer messages


def test_a_client_that_does_not_ask_never_gets_a_batch(coordinator: Coordinator) -> None:
    session = coordinator.session()
    tags = [session.send("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=f"m{n}")) for n in range(20)]
    assert all(session.answer(tag).error.code == pb.UNKNOWN_MEMBER_ID for tag in tags)
    assert session.messages == 20


@pytest.mark.parametrize(("batch", "expected"), [
    (pb.SessionRequest(tag=3, batch=[pb.SessionRequest(tag=4, heartbeat=pb.HeartbeatRequest(group_id="g"))]),
     "no tag or body of its own"),
    (pb.SessionRequest(batch=[pb.SessionRequest(batch=[pb.SessionRequest(
        tag=4, heartbeat=pb.HeartbeatRequest(group_id="g"))])]), "a batch inside a batch"),
    (pb.SessionRequest(batch=[pb.SessionRequest(tag=n + 1, heartbeat=pb.HeartbeatRequest(group_id="g"))
                              for n in range(MAX_BATCH + 1)]), f"at most {MAX_BATCH:,}"),
    (pb.SessionRequest(batch=[pb.SessionRequest(tag=n + 1, heartbeat=pb.HeartbeatRequest(group_id="g" * 200))
                              for n in range(1_300)]), "never a batch"),  # 256 KiB and more: read as one request
])
def test_a_batch_that_breaks_the_rules_ends_the_stream(coordinator: Coordinator, batch: pb.SessionRequest,
                                                       expected: str) -> None:
    session = RawSession(coordinator.channel, READS_BATCHES, raw=True)
    session.send_raw(batch.SerializeToString())
    assert session.ended_with() == grpc.StatusCode.INVALID_ARGUMENT
    assert session.status is not None and expected in (session.status.details() or ""), session.status
