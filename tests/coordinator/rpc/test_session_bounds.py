"""The Session stream's per-stream bounds over a real gRPC server on loopback (timers and idleness on an
injected clock): an oversized message, too many members, too many requests in flight, an idle stream."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.rpc.session_client import RawSession
from tests.coordinator.rpc.test_session_stream import join_request

MAX_MESSAGE = 300_000


@dataclass
class Coordinator:
    server: ServerThread
    channel: grpc.Channel
    clock: FakeClock

    def advance(self, seconds: float) -> None:
        runtime = self.server.runtime
        self.server.call(lambda: (self.clock.advance(seconds), runtime.poll_timers()))


def held(server: ServerThread, count: int, timeout: float = 10.0) -> None:
    """Wait until ``count`` requests are held by the coordinator (a join waiting for its phase's end)."""
    deadline = time.monotonic() + timeout
    while server.call(server.runtime.waiting) < count:
        assert time.monotonic() < deadline, f"fewer than {count} requests held within {timeout} s"
        time.sleep(0.01)


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    clock = FakeClock()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=3_000, group_min_session_timeout_ms=200,
                               session_max_message_bytes=MAX_MESSAGE, session_max_members=2,
                               session_max_in_flight=2, session_idle_timeout_ms=60_000)
    with ServerThread(CoordinatorRuntime(config, clock=clock)) as server, \
            grpc.insecure_channel(server.address) as channel:
        yield Coordinator(server, channel, clock)


def test_an_oversized_message_is_answered_under_its_tag_unread(coordinator: Coordinator) -> None:
    session = RawSession(coordinator.channel, raw=True)
    big = pb.SessionRequest(tag=3, join_group=join_request("g")).SerializeToString()
    big = big[:-2] + b"\xff" * (MAX_MESSAGE + 10)  # past the bound, and not a valid body beyond its first bytes
    session.send_raw(big)
    answer = session.answer(3)
    assert answer.error.code == pb.INVALID_REQUEST
    assert "session_max_message_bytes" in answer.error.message and "JoinGroup" in answer.error.message
    session.send_raw(pb.SessionRequest(tag=4, join_group=join_request("g")).SerializeToString())
    assert session.answer(4).error.code == pb.MEMBER_ID_REQUIRED  # the stream goes on
    assert coordinator.server.call(lambda: len(coordinator.server.runtime.groups)) == 1


def test_a_large_message_is_parsed_off_the_loop_and_answered(coordinator: Coordinator) -> None:
    session = RawSession(coordinator.channel)
    request = join_request("g")
    request.metadata.user_data = b"u" * 280_000  # between 256 KiB (parsed on a thread) and the bound
    first = session.ask("join_group", request)
    assert first.error.code == pb.MEMBER_ID_REQUIRED
    request.member_id = first.member_id
    parked = session.send("join_group", request)
    beat = session.send("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=first.member_id, generation=0))
    assert session.answer(beat).error.code == pb.REBALANCE_IN_PROGRESS  # handled after the join it followed
    coordinator.advance(3.5)
    assert session.answer(parked).error.code == pb.NONE


def test_a_stream_carries_at_most_its_members(coordinator: Coordinator) -> None:
    session = RawSession(coordinator.channel)
    ids = [session.ask("join_group", join_request("g", client_id=f"w{i}")).member_id for i in range(2)]
    assert session.ask("join_group", join_request("h")) is None  # an empty answer: send it unary
    left = session.ask("leave_group", pb.LeaveGroupRequest(group_id="g", members=[pb.MemberIdentity(member_id=ids[0])]))
    assert left.error.code == pb.NONE
    assert session.ask("join_group", join_request("h")).error.code == pb.MEMBER_ID_REQUIRED  # room again


def test_a_stream_has_at_most_its_requests_in_flight(coordinator: Coordinator) -> None:
    session = RawSession(coordinator.channel)
    ids = [session.ask("join_group", join_request("g", client_id=f"w{i}")).member_id for i in range(2)]
    parked = [session.send("join_group", join_request("g", member_id, f"w{i}")) for i, member_id in enumerate(ids)]
    refused = session.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=ids[0]))
    assert refused.error.code == pb.INVALID_REQUEST and "session_max_in_flight" in refused.error.message
    for _ in range(4):  # the initial delay (3 s, once more for the second new member) ends: both are answered
        coordinator.advance(3.5)
    assert [session.answer(tag).error.code for tag in parked] == [pb.NONE, pb.NONE]
    beat = session.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=ids[0], generation=1))
    assert beat.error.code == pb.REBALANCE_IN_PROGRESS  # in flight again: the group awaits its leader's sync


def test_an_idle_stream_is_closed_on_the_clock_and_a_busy_one_is_not(coordinator: Coordinator) -> None:
    sessions = coordinator.server.sessions
    idle, busy = RawSession(coordinator.channel), RawSession(coordinator.channel)
    assert idle.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id="x")).error.code == pb.UNKNOWN_MEMBER_ID
    first = busy.ask("join_group", join_request("g"))
    parked = busy.send("join_group", join_request("g", first.member_id))  # held: the stream is not idle
    held(coordinator.server, 1)  # read and held before the clock moves (else the stream looks idle meanwhile)
    coordinator.server.call(lambda: coordinator.clock.advance(59))
    assert coordinator.server.call(sessions.sweep_idle) == 0
    coordinator.server.call(lambda: coordinator.clock.advance(2))
    assert coordinator.server.call(sessions.sweep_idle) == 1
    assert idle.ended_with() == grpc.StatusCode.UNAVAILABLE
    assert idle.status is not None and "session_idle_timeout_ms" in (idle.status.details() or "")
    coordinator.advance(1)
    assert busy.answer(parked).error.code == pb.NONE
