"""New members' ids come from the id source the model is given (a counter here), not from inside it."""

from __future__ import annotations

from itertools import count

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.model.effects import Reply
from groupcoord.coordinator.model.model import CoordinatorModel, random_member_id
from groupcoord.v1 import groupcoord_pb2 as pb


def _answer(effects: list[object]) -> pb.JoinGroupResponse:
    replies = [e for e in effects if isinstance(e, Reply)]
    assert len(replies) == 1, effects
    response = replies[0].response
    assert isinstance(response, pb.JoinGroupResponse)
    return response


def test_a_new_member_is_named_by_the_injected_source() -> None:
    numbers = count(1)
    model = CoordinatorModel(clock=FakeClock(), new_member_id=lambda name: f"{name}#{next(numbers)}")
    request = pb.JoinGroupRequest(group_id="g", client_id="svc", session_timeout_ms=10_000,
                                  rebalance_timeout_ms=30_000, protocols=["round-robin"])
    first = _answer(model.join(request, 1, "127.0.0.1", ""))
    again = _answer(model.join(request, 2, "127.0.0.1", ""))  # a retried first join: the next id
    assert (first.error.code, first.member_id) == (pb.MEMBER_ID_REQUIRED, "svc#1")
    assert (again.error.code, again.member_id) == (pb.MEMBER_ID_REQUIRED, "svc#2")


def test_the_default_source_appends_a_uuid_of_37_characters() -> None:
    made = {random_member_id("svc") for _ in range(3)}
    assert len(made) == 3 and all(m.startswith("svc-") and len(m) == len("svc") + 37 for m in made)
