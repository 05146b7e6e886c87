"""The leader-side assignor ("client:<name>") in the model, on a fake clock with ``validate()`` after
every step: the coordinator asks one member for the target of an epoch in its heartbeat answer, the
member (a raw test client here) answers only what changed, the coordinator checks what changed and
falls back to its own assignor of that name, or keeps the previous target, when the answer is wrong
or late."""

from __future__ import annotations

import pytest

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import Offload
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G, heartbeat

CATALOG = {TaskReplica(f"t{i}") for i in range(6)}


def fleet(names: str, assignor: str = "client:round-robin") -> Fleet:
    h = Harness(CoordinatorConfig())
    assert h.put_tasks(G, *(f"t{i}" for i in range(6))) == pb.NONE
    f = Fleet(h, list(names))
    for name in names:
        assert f.join(name, assignor=assignor).error.code == pb.NONE
    return f


def asked(f: Fleet, name: str) -> pb.TargetRequest | None:
    """``name`` heartbeats; the target request its answer carries, if any."""
    answer = f.beat(name)
    return answer.compute_target if answer.HasField("compute_target") else None


def answer_target(f: Fleet, name: str, epoch: int, target: dict[str, list[str]], error: str = "",
                  ) -> pb.GroupHeartbeatResponse:
    """``name`` heartbeats with its answer: ``target`` maps member names to task ids (the delta)."""
    m = f.members[name]
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=m.member_id, member_epoch=m.epoch)
    request.owned.SetInParent()
    request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in m.running)
    request.target.group_epoch, request.target.error = epoch, error
    for who, tasks in target.items():
        request.target.assignments.add(member_id=f.members[who].member_id if who in f.members else who,
                                       tasks=[pb.TaskReplica(task_id=t) for t in tasks])
    return f._apply(m, heartbeat(f.h, request).response)


def first_target(f: Fleet) -> pb.TargetRequest:
    f.h.advance(0.2)
    request = asked(f, "a")
    assert request is not None
    return request


def test_the_leader_is_asked_and_its_answer_is_the_target() -> None:
    f = fleet("ab")
    request = first_target(f)
    group = f.h.model.consumer.groups[G]
    assert request.group_epoch == group.epoch and request.assignor == "round-robin"
    assert {m.member_id for m in request.members} == set(group.members) and len(request.tasks) == 6
    assert not [e for e in f.h.effects if isinstance(e, Offload)]  # the coordinator computes nothing itself
    assert asked(f, "b") is None and asked(f, "a") is None  # only the leader, only once
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"]})
    assert group.target_epoch == group.epoch and not group.last_error
    f.settle()
    assert f.running() == {"a": {TaskReplica(t) for t in ("t0", "t1", "t2")},
                           "b": {TaskReplica(t) for t in ("t3", "t4", "t5")}}


def test_a_change_is_answered_with_only_what_changed() -> None:
    f = fleet("abc")
    f.members["c"].joined = False  # c joins later
    request = first_target(f)
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"], "c": []})
    f.settle()
    f.join("c", assignor="client:round-robin")
    request = first_target(f)
    group = f.h.model.consumer.groups[G]
    mine = {m.member_id: {t.task_id for t in m.assigned} for m in request.members}
    assert mine[f.members["a"].member_id] == {"t0", "t1", "t2"}  # each member with its current target
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1"], "b": ["t3", "t4"], "c": ["t2", "t5"]})
    assert group.target_epoch == request.group_epoch and not group.last_error
    f.settle()
    assert sorted(map(len, f.running().values())) == [2, 2, 2] and set().union(*f.running().values()) == CATALOG


@pytest.mark.parametrize(("target", "error", "why"), [
    ({"a": ["t0", "t1", "t2", "t3"]}, "", "stays with"),  # t3 is b's and b is not listed
    ({"a": ["t0", "t9"]}, "", "not in the catalog"),
    ({"a": ["t0"], "b": ["t0"]}, "", "given twice"),
    ({}, "no plan today", "the leader's assignor failed: no plan today"),
])
def test_a_wrong_answer_falls_back_to_the_coordinators_assignor(target: dict[str, list[str]], error: str,
                                                                 why: str, caplog: pytest.LogCaptureFixture) -> None:
    f = fleet("ab")
    request = first_target(f)
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"]})
    f.settle()
    f.h.put_tasks(G, "t6")  # the catalog moves the epoch: the leader is asked again
    request = first_target(f)
    group = f.h.model.consumer.groups[G]
    answer_target(f, "a", request.group_epoch, target, error)
    assert why in caplog.text and group.failed_leader == f.members["a"].member_id
    f.settle()  # round-robin on the coordinator computed it instead
    assert group.target_epoch == group.epoch
    assert set().union(*f.running().values()) == CATALOG | {TaskReplica("t6")}


def test_a_silent_leader_is_replaced_by_the_coordinators_assignor_and_not_asked_again(
        caplog: pytest.LogCaptureFixture) -> None:
    f = fleet("ab")
    first_target(f)  # a is asked, and never answers
    group = f.h.model.consumer.groups[G]
    for _ in range(10):
        f.h.advance(2.0)
        f.beat("a")
        f.beat("b")
    assert "did not answer" in caplog.text and group.target_epoch == group.epoch
    assert set().union(*f.running().values()) == CATALOG
    f.h.put_tasks(G, "t6")
    f.h.advance(0.2)
    assert asked(f, "b") is not None and group.leader_id == f.members["b"].member_id


def test_without_the_assignor_on_the_coordinator_the_previous_target_stays() -> None:
    f = fleet("ab", assignor="client:only-on-workers")
    request = first_target(f)
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"]})
    f.settle()
    group = f.h.model.consumer.groups[G]
    before, epoch = dict(group.target), group.target_epoch
    f.h.put_tasks(G, "t6")
    request = first_target(f)
    answer_target(f, "a", request.group_epoch, {"a": ["t9"]})
    f.settle()
    assert group.target == before and group.target_epoch == epoch and "not in the catalog" in group.last_error
    assert set().union(*f.running().values()) == CATALOG


def test_without_the_assignor_on_the_coordinator_a_silent_leader_is_followed_by_another_at_once() -> None:
    """A leader slower than its deadline (a loaded machine) must not leave the group without a target until
    something else changes: the same epoch is asked of the other member, whose answer is installed."""
    f = fleet("ab", assignor="client:only-on-workers")
    request = first_target(f)  # a is asked, and never answers
    group = f.h.model.consumer.groups[G]
    again = None
    for _ in range(20):  # the deadline: three heartbeat intervals
        f.h.advance(1.0)
        f.beat("a")
        again = asked(f, "b")
        if again is not None:
            break
    assert again is not None and again.group_epoch == request.group_epoch == group.epoch
    assert group.leader_id == f.members["b"].member_id and "did not answer" in group.last_error
    answer_target(f, "b", again.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"]})
    assert group.target_epoch == group.epoch
    f.settle()
    assert set().union(*f.running().values()) == CATALOG


def test_an_answer_for_another_epoch_or_from_another_member_is_ignored() -> None:
    f = fleet("ab")
    request = first_target(f)
    group = f.h.model.consumer.groups[G]
    answer_target(f, "a", request.group_epoch - 1, {"a": ["t0"]})
    answer_target(f, "b", request.group_epoch, {"b": ["t0"]})
    assert group.target_epoch < group.epoch and group.asked is not None and not group.last_error
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"]})
    assert group.target_epoch == group.epoch


def test_a_leader_side_assignor_name_must_name_something() -> None:
    h = Harness(CoordinatorConfig())
    refused = heartbeat(h, pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, assignor="client:",
                                                    session_timeout_ms=6_000))
    assert refused.code == pb.UNSUPPORTED_ASSIGNOR and G not in h.model.consumer.groups


def test_a_target_request_over_half_the_message_bound_is_computed_by_the_coordinator(
        caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(CoordinatorConfig(max_message_bytes=4_096, max_request_bytes_in_flight=4_096))
    assert h.put_tasks(G, *(f"task-with-a-long-name-{i:04d}" for i in range(200))) == pb.NONE
    f = Fleet(h, ["a", "b"])
    f.join("a", assignor="client:round-robin")
    f.join("b", assignor="client:round-robin")
    f.h.advance(0.2)
    assert asked(f, "a") is None and "bytes (half of max_message_bytes: 2048)" in caplog.text
    f.settle()
    assert sum(map(len, f.running().values())) == 200  # the coordinator's own round-robin placed them


def test_a_change_while_the_leader_is_asked_is_asked_of_another_leader_when_it_fails() -> None:
    """With no assignor of that name on the coordinator, a fallback keeps the previous target; when the group
    epoch moved while the failed leader was asked (c joined), another member is asked at once for the new
    epoch, rather than the group waiting for some later change (c would get nothing until then)."""
    f = fleet("abc", assignor="client:only-on-workers")
    f.members["c"].joined = False
    request = first_target(f)
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1", "t2"], "b": ["t3", "t4", "t5"]})
    f.settle()
    f.h.put_tasks(G, "t6")
    first_target(f)  # a is asked, and never answers
    group = f.h.model.consumer.groups[G]
    f.join("c", assignor="client:only-on-workers")  # the epoch moves while a is asked
    again = None
    for _ in range(10):
        f.h.advance(2.0)
        f.beat("a")
        again = again or asked(f, "b")
        f.beat("c")
    assert again is not None and again.group_epoch == group.epoch and len(again.members) == 3
    assert group.leader_id == f.members["b"].member_id
    answer_target(f, "b", again.group_epoch, {"a": ["t0", "t1"], "b": ["t3", "t4"], "c": ["t2", "t5", "t6"]})
    f.settle()
    assert f.running()["c"] == {TaskReplica(t) for t in ("t2", "t5", "t6")}


@pytest.mark.parametrize("gone", ["leaves", "session ends"])
def test_a_leader_gone_while_asked_is_replaced_at_once_not_after_three_intervals(
        gone: str, caplog: pytest.LogCaptureFixture) -> None:
    f = fleet("abc", assignor="client:only-on-workers")
    request = first_target(f)
    answer_target(f, "a", request.group_epoch, {"a": ["t0", "t1"], "b": ["t2", "t3"], "c": ["t4", "t5"]})
    f.settle()
    f.h.put_tasks(G, "t6")
    first_target(f)  # a is asked ...
    group = f.h.model.consumer.groups[G]
    if gone == "leaves":
        f.leave("a")  # ... and leaves before it answers
    else:
        for _ in range(30):  # ... and falls silent: its session (45 s) ends; b and c heartbeat
            f.h.advance(2.0)
            if f.members["a"].member_id not in group.members:
                break
            f.beat("b")
            f.beat("c")
        assert f.members["a"].member_id not in group.members
        f.members["a"].stop()  # as its client does once a session passed unheard
    f.h.advance(0.2)  # the assignment interval, not 3 heartbeat intervals (15 s)
    again = asked(f, "b")
    assert again is not None and again.group_epoch == group.epoch and len(again.members) == 2
    assert "left the group before it answered" in caplog.text or "did not answer" in caplog.text
    answer_target(f, "b", again.group_epoch, {"b": ["t0", "t1", "t2", "t3"], "c": ["t4", "t5", "t6"]})
    f.settle()
    assert set().union(*(f.running()[n] for n in "bc")) == CATALOG | {TaskReplica("t6")}
