"""The leader's duties as plain functions: whatever the assignor raises is reported; re-checks on a clock."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, RebalanceCheck
from groupcoord.assignors.round_robin import RoundRobinAssignor
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.leader import Recheck, leader_sync_request

JOIN = pb.JoinGroupResponse(
    generation=3, protocol="custom", leader_id="m-1", member_id="m-1",
    members=[pb.GroupMember(member_id="m-1")], tasks=[pb.Task(task_id="a", replicas=1)],
)


class Raising:
    name = "custom"

    def __init__(self, error: Exception | None, returns: object = None) -> None:
        self.error = error
        self.returns = returns

    def assign(self, context: AssignmentContext) -> Assignment:
        if self.error is not None:
            raise self.error
        return self.returns  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("error", "reported"),
    [
        (AssignorError("pool p has no members"), "AssignorError: pool p has no members"),
        (RuntimeError("the assignor's own bug"), "RuntimeError: the assignor's own bug"),
        (KeyError("m-9"), "KeyError: 'm-9'"),
        (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    ],
)
def test_any_exception_from_assign_goes_out_as_the_assignor_error(error: Exception, reported: str) -> None:
    request = leader_sync_request(lambda name: Raising(error), "g", "m-1", JOIN)
    assert (request.group_id, request.member_id, request.generation) == ("g", "m-1", 3)
    assert request.assignor_error == reported and not request.assignments


def test_an_answer_that_is_not_an_assignment_is_reported_too() -> None:
    request = leader_sync_request(lambda name: Raising(None, returns=None), "g", "m-1", JOIN)
    assert request.assignor_error.startswith("AttributeError: ")


def test_an_unknown_assignor_is_reported() -> None:
    def lookup(name: str) -> RoundRobinAssignor:
        raise LookupError(f"no assignor {name!r}")

    assert leader_sync_request(lookup, "g", "m-1", JOIN).assignor_error == "LookupError: no assignor 'custom'"


def test_a_working_assignor_sends_its_assignment() -> None:
    request = leader_sync_request(lambda name: RoundRobinAssignor(), "g", "m-1", JOIN)
    assert request.assignor_error == ""
    assert [(a.member_id, [t.task_id for t in a.tasks]) for a in request.assignments] == [("m-1", ["a"])]


class Checking(RoundRobinAssignor):
    recheck_interval_s = 10.0

    def __init__(self) -> None:
        self.answers: list[bool] = []
        self.asked = 0

    def needs_rebalance(self, context: AssignmentContext) -> bool:
        self.asked += 1
        return self.answers.pop(0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def described(generation: int = 3) -> pb.DescribeGroupResponse:
    return pb.DescribeGroupResponse(group_id="g", generation=generation, members=[], tasks=[])


def wants(recheck: Recheck, protocol: str, generation: int,
          describe: Callable[[], pb.DescribeGroupResponse]) -> bool:
    """What the member core does each Stable tick: ``due``, then fetch the group, then ``judge``."""
    check = recheck.due(protocol)
    return check is not None and recheck.judge(check, protocol, generation, describe())


def test_the_rebalance_check_protocol_is_found_by_its_members() -> None:
    assert isinstance(Checking(), RebalanceCheck)
    assert not isinstance(RoundRobinAssignor(), RebalanceCheck)


def test_the_leader_rechecks_once_per_interval_on_the_current_generation() -> None:
    clock, assignor = Clock(), Checking()
    recheck = Recheck(lambda name: assignor, clock)
    fetched: list[int] = []

    def describe(generation: int = 3) -> pb.DescribeGroupResponse:
        fetched.append(generation)
        return described(generation)

    assert not wants(recheck, "custom", 3, describe)  # the interval starts now
    clock.now += 9.9
    assert not wants(recheck, "custom", 3, describe) and fetched == []
    clock.now += 0.1
    assignor.answers = [False]
    assert not wants(recheck, "custom", 3, describe) and fetched == [3]
    clock.now += 10
    assignor.answers = [True]
    assert wants(recheck, "custom", 3, describe)
    clock.now += 10
    assert not wants(recheck, "custom", 3, lambda: described(4))  # the group moved on: not our call
    assert assignor.asked == 2

    recheck.reset()  # a new generation: one whole interval again before the next check
    assert not wants(recheck, "custom", 3, describe)
    assert len(fetched) == 2


def test_a_failed_recheck_is_skipped() -> None:
    clock, assignor = Clock(), Checking()
    recheck = Recheck(lambda name: assignor, clock)
    wants(recheck, "custom", 3, described)
    clock.now += 10

    assignor.answers = [False]
    assert not wants(recheck, "custom", 3, described)  # (an unreachable coordinator: tests/worker/test_member.py)
    clock.now += 10
    assignor.answers = []  # needs_rebalance raises IndexError: logged, not raised
    assert not wants(recheck, "custom", 3, described)


def test_assignors_without_the_hook_or_with_it_off_are_never_asked() -> None:
    clock = Clock()
    off = Checking()
    off.recheck_interval_s = 0
    for assignor in (RoundRobinAssignor(), off):
        recheck = Recheck(lambda name, a=assignor: a, clock)  # type: ignore[misc]
        for _ in range(3):
            clock.now += 100
            assert not wants(recheck, "x", 3, lambda: pytest.fail("described without a hook"))
    assert off.asked == 0
