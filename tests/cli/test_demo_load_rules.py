"""Act two's rules for a loaded machine (issue 38 item 7): sessions from the load, and a rebalance for a
missed session waited out, never taken for the assignor's."""

from __future__ import annotations

import pytest

from groupcoord.cli import demo_load
from groupcoord.cli.demo_load import TASKS_PER_GROUP, _assigned_on, _Log, _rejoined, session_ms
from groupcoord.v1 import groupcoord_pb2 as pb


def described(generation: int, state: int = pb.STABLE) -> pb.DescribeGroupResponse:
    per_member = TASKS_PER_GROUP // 3
    return pb.DescribeGroupResponse(state=state, generation=generation, members=[
        pb.DescribedMember(member=pb.GroupMember(member_id=f"m{i}", client_id=f"w{i}"),
                           assigned=[pb.TaskReplica(task_id=f"t{i}-{j}") for j in range(per_member)])
        for i in range(3)])


def test_only_the_generation_its_leader_assigned_on_the_snapshot_counts() -> None:
    log = _Log()
    check = _assigned_on(log, "g", "snap-2")
    assert not check(described(7))  # a rebalance for a missed session: no assignment on this snapshot yet
    log.assigning("g", "snap-1", 8)
    assert not check(described(8))
    log.assigning("g", "snap-2", 9)
    assert not check(described(8)) and not check(described(9, pb.AWAITING_SYNC))
    assert check(described(9)) and check(described(10))


def test_a_worker_under_a_new_member_id_missed_its_session() -> None:
    assert _rejoined({"w0": "a", "w1": "b", "w2": "c"}, {"w0": "a", "w1": "b2", "w2": "c"}) == ["w1"]
    assert _rejoined({"w0": "a"}, {"w0": "a", "w1": "b"}) == []  # not there before: nothing to compare


@pytest.mark.parametrize(("load", "expected"), [(0.5, 20_000), (4.0, 40_000), (30.0, 100_000)])
def test_sessions_stretch_with_the_load_per_core(monkeypatch: pytest.MonkeyPatch, load: float, expected: int) -> None:
    monkeypatch.setattr(demo_load.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(demo_load.os, "cpu_count", lambda: 2)
    assert session_ms(20_000) == expected
