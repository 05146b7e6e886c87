"""An overloaded or stalled coordinator never expires a member for time it lost itself."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import grpc

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

GROUP = "g"


def test_time_the_coordinator_lost_is_not_held_against_a_session() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(GROUP, session_timeout_ms=10_000)
    h.sync(GROUP, a, 1, {a: []})
    h.advance(6.0)
    h.runtime.lag.note(4.5)  # the loop ran 4.5 s late (less the 20 ms of slack)
    h.advance(4.1)  # 10.1 s since a was heard: its session would be over
    assert a in h.group(GROUP).members and h.state(GROUP) == "Stable"
    h.advance(4.5)  # the lost time, once: now it is over
    assert a not in h.group(GROUP).members


def test_lost_time_before_the_member_was_last_heard_does_not_count() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(GROUP, session_timeout_ms=10_000)
    h.sync(GROUP, a, 1, {a: []})
    h.runtime.lag.note(5.0)
    assert h.heartbeat(GROUP, a, 1) == pb.NONE  # heard after the stall: a fresh session
    h.advance(10.1)
    assert a not in h.group(GROUP).members


def test_a_stalled_event_loop_expels_nobody_who_kept_heartbeating() -> None:
    """The coordinator's loop is blocked for longer than a member's session while the member keeps
    sending heartbeats (they wait in line). When the loop runs again, the member is not expelled."""
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    with ServerThread(CoordinatorRuntime(config)) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        join = pb.JoinGroupRequest(group_id=GROUP, client_id="c", session_timeout_ms=1_500,
                                   rebalance_timeout_ms=5_000, protocols=["round-robin"])
        join.member_id = stub.JoinGroup(join, timeout=5).member_id
        joined = stub.JoinGroup(join, timeout=5)
        stub.SyncGroup(pb.SyncGroupRequest(group_id=GROUP, member_id=join.member_id, generation=joined.generation),
                       timeout=5)
        beat = pb.HeartbeatRequest(group_id=GROUP, member_id=join.member_id, generation=joined.generation)
        stop = threading.Event()
        answers: list[Future[Any]] = []

        def keep_beating() -> None:
            while not stop.wait(0.1):
                answers.append(stub.Heartbeat.future(beat, timeout=30))

        beater = threading.Thread(target=keep_beating, daemon=True)
        beater.start()
        try:
            server.call(lambda: time.sleep(2.5), timeout=10)  # the loop holds still past the session
            time.sleep(0.5)
        finally:
            stop.set()
            beater.join(5)
        codes = [f.result(timeout=10).error.code for f in answers]
        assert set(codes) == {pb.NONE}, [pb.ErrorCode.Name(c) for c in codes]
        assert server.call(lambda: join.member_id in server.runtime.groups[GROUP].members)
        assert server.call(lambda: server.runtime.lag.worst_s) >= 2.0


def test_the_join_deadline_moves_by_the_time_the_coordinator_lost() -> None:
    """A rebalance gives a 3 s to re-join; the loop ran 2.5 s late meanwhile (a's heartbeat, whose
    answer tells it to re-join, waited in line): a is not removed at 3 s, only once the lost time
    has passed too."""
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=3_000)
    h.sync(GROUP, a, 1, {a: []})
    h.join_new(GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=3_000)  # a newcomer: a must re-join
    assert h.state(GROUP) == "PreparingRebalance"
    h.runtime.lag.note(2.5)
    h.advance(3.1)
    assert a in h.group(GROUP).members and h.state(GROUP) == "PreparingRebalance"
    h.advance(2.5)  # the lost time, once: a never re-joined, so it is removed now
    assert a not in h.group(GROUP).members and h.state(GROUP) == "AwaitingSync"


def test_the_sync_deadline_moves_by_the_time_the_coordinator_lost() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    a, _ = h.join_new(GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=3_000)
    b, held = h.join_new(GROUP, session_timeout_ms=30_000, rebalance_timeout_ms=3_000)
    h.join(GROUP, a, session_timeout_ms=30_000, rebalance_timeout_ms=3_000)
    generation = h.group(GROUP).generation
    assert h.state(GROUP) == "AwaitingSync" and held.done
    h.sync(GROUP, a, generation, {a: [], b: []})  # the leader's assignment; b owes its SyncGroup
    h.runtime.lag.note(2.5)
    h.advance(3.1)
    assert b in h.group(GROUP).members and h.group(GROUP).generation == generation
    h.advance(2.5)
    assert b not in h.group(GROUP).members  # b never sent it: removed once the lost time has passed
