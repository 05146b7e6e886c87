"""A member that arrives on a stream after its group's target landed is told it once: by the catch-up
on arrival, not again when that target's write is reported (a duplicate made a member act twice)."""

from __future__ import annotations

from typing import Any

import grpc

from groupcoord.coordinator.rpc.session_registry import MemberKey, SessionRegistry
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G


class Recorder:
    """A stream as the registry sees it, keeping what it was told."""

    principal = "anonymous"
    in_flight = 0
    last_active = 0.0

    def __init__(self) -> None:
        self.told: list[pb.SessionNews] = []

    def push(self, news: pb.SessionNews) -> None:
        self.told.append(news)

    def push_frame(self, data: bytes) -> None:
        self.told.append(pb.SessionResponse.FromString(data).news)

    def forget_member(self, key: MemberKey) -> None:
        pass

    def finish(self, code: grpc.StatusCode, message: str, *, flush: bool = False, reason: str = "protocol") -> None:
        pass


def _target_landed(h: Harness, fleet: Fleet) -> Any:
    for _ in range(100):
        group = h.model.consumer.groups[G]
        if group.target_epoch == group.epoch and not group.computing and group.target:
            return group
        h.advance(0.2)
    raise AssertionError("the target did not land")


def test_a_member_caught_up_on_arrival_is_not_told_the_same_target_again() -> None:
    h = Harness()
    registry = SessionRegistry(ShardRouter([h.runtime]))
    assert h.put_tasks(G, "t0", "t1") == pb.NONE
    fleet = Fleet(h, ["a"])
    joined = fleet.join("a")
    _target_landed(h, fleet)
    stream = Recorder()
    registry.carry((G, joined.member_id), stream)  # arrives after the target landed: caught up
    assert [n.WhichOneof("news") for n in stream.told] == ["assignment_changed"]
    registry.changed(h.runtime, h.group(G))  # that target's write reported afterwards
    assert len(stream.told) == 1, stream.told


def test_a_later_target_is_told_to_a_member_that_was_caught_up_on_an_earlier_one() -> None:
    h = Harness()
    registry = SessionRegistry(ShardRouter([h.runtime]))
    assert h.put_tasks(G, "t0", "t1", "t2", "t3") == pb.NONE
    fleet = Fleet(h, ["a", "b"])
    joined = fleet.join("a")
    _target_landed(h, fleet)
    stream = Recorder()
    registry.carry((G, joined.member_id), stream)
    fleet.beat("a")  # takes its target
    fleet.join("b")  # a new target: a gives two tasks up
    _target_landed(h, fleet)
    registry.changed(h.runtime, h.group(G))
    assert [n.WhichOneof("news") for n in stream.told] == ["assignment_changed", "tasks_to_give_up"]
