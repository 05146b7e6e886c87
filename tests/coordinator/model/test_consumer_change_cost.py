"""The steps on the loop around a new consumer target find what changed in C and then visit only
that (issue 34: one member joining 10,000): a target replacing another marks exactly the members
whose set changed, an incremental answer is checked for the members whose set is a new object only,
and a computation's inputs take the members' kept views by reference, building those missing."""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.incremental import TargetChange
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_target import check_moves, inputs_of
from groupcoord.coordinator.model.effects import Effect, TimerKey
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.coordinator.model.target_map import TargetMap
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.test_consumer_request_cost import run

T = [TaskReplica(f"t{i}") for i in range(8)]


def test_a_new_target_marks_the_members_whose_set_changed_or_went_and_the_new_ones() -> None:
    kept, same = frozenset(T[0:2]), frozenset(T[2:4])
    old = TargetMap({"kept": kept, "equal": same, "moved": frozenset(T[4:6]), "gone": frozenset(T[6:7])})
    old.drain()
    old["pending"] = frozenset()  # changed before, not yet written: still changed after
    new = {"kept": kept, "equal": frozenset(T[2:4]), "moved": frozenset(T[4:5]), "pending": frozenset(),
           "joined": frozenset(T[7:8])}
    made = TargetMap.replacing(old, new)
    assert isinstance(made, TargetMap) and dict(made) == new
    assert made.drain() == {"moved", "gone", "pending", "joined"}
    assert TargetMap.replacing(None, new).drain() == set(new)  # no old one: every member is new


def test_an_incremental_answer_is_checked_where_a_set_is_a_new_object() -> None:
    a_had, b_had = frozenset(T[0:3]), frozenset(T[3:6])
    catalog = CatalogSnapshot(1, {f"t{i}": pb.Task(task_id=f"t{i}") for i in range(7)})
    change = TargetChange(previous={"a": a_had, "b": b_had}, members=(), homeless=frozenset(T[6:7]),
                          removed=frozenset(), total=7, plain=True)
    equal_copy = {"a": frozenset(T[0:3]), "b": b_had, "c": frozenset(T[6:7])}  # a: equal, not the same object
    assert check_moves(change, equal_copy, {"a", "b", "c"}, catalog) == equal_copy
    as_sets = {"a": set(T[0:2]), "b": b_had, "c": {T[2], T[6]}}  # not frozensets: made so
    checked = check_moves(change, as_sets, {"a", "b", "c"}, catalog)  # type: ignore[arg-type]
    assert isinstance(checked, dict) and all(isinstance(tasks, frozenset) for tasks in checked.values())
    assert checked == {"a": frozenset(T[0:2]), "b": b_had, "c": frozenset({T[2], T[6]})}
    stolen = {"a": a_had, "b": frozenset(T[4:6]), "c": frozenset({T[3], T[6]}) | {T[0]}}  # T[0]: a keeps it
    assert "twice" in str(check_moves(change, stolen, {"a", "b", "c"}, catalog))
    assert "members" in str(check_moves(change, {"a": a_had, "b": b_had}, {"a", "b", "c"}, catalog))


def member(member_id: str) -> ConsumerMember:
    return ConsumerMember(member_id=member_id, instance_id="", client_id="c", host="h", principal="",
                          metadata=pb.MemberMetadata(rack=f"rack-{member_id}"), session_timeout_ms=1,
                          rebalance_timeout_ms=1)


def test_a_computation_takes_the_kept_views_and_builds_the_missing_ones() -> None:
    group = ConsumerGroup("g", "sticky")
    for name in ("a", "b", "c"):
        group.add(member(name))
    kept = group.members["a"].placement_view()
    inputs = inputs_of(group, None)
    assert inputs.views[0] is kept  # by reference
    assert [view.rack for view in inputs.views] == ["rack-a", "rack-b", "rack-c"]  # built where missing
    assert inputs.owned == tuple(m.reconciled for m in group.members.values())
    group.members["b"].metadata, group.members["b"].info = pb.MemberMetadata(rack="moved"), None
    again = inputs_of(group, None)
    assert [view.rack for view in again.views] == ["rack-a", "moved", "rack-c"]
    assert again.views[0] is kept and again.views[2] is inputs.views[2]


G = "g"


def _answer(model: CoordinatorModel, effects: list[Effect]) -> pb.GroupHeartbeatResponse:
    [reply] = run(model, effects)
    response = reply.response
    assert isinstance(response, pb.GroupHeartbeatResponse) and response.error.code == pb.NONE, response
    return response


def _beat(model: CoordinatorModel, member_id: str, epoch: int) -> pb.GroupHeartbeatResponse:
    group = model.consumer.groups[G]
    owned = sorted(group.members[member_id].reconciled.assigned) if member_id in group.members else []
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=member_id, member_epoch=epoch)
    request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in owned)
    return _answer(model, model.group_heartbeat(request, 1))


def _settled(model: CoordinatorModel, epochs: dict[str, int]) -> None:
    """Every member heartbeats until none changes: the target taken everywhere."""
    for _ in range(4):
        for member_id in list(epochs):
            epochs[member_id] = _beat(model, member_id, epochs[member_id]).member_epoch
    group = model.consumer.groups[G]
    assert all(m.reconciled.state is MemberState.STABLE and m.epoch == group.target_epoch
               for m in group.members.values())


def test_an_untouched_member_takes_the_new_epoch_holding_its_target_set_and_is_sent_no_list() -> None:
    model = CoordinatorModel(clock=FakeClock())
    run(model, model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=f"t{i}") for i in range(30)]), 1))
    epochs: dict[str, int] = {}
    for name in "abcdefghij":
        joined = _answer(model, model.group_heartbeat(pb.GroupHeartbeatRequest(
            group_id=G, member_epoch=0, client_id=name), 1))
        epochs[joined.member_id] = joined.member_epoch
    run(model, model.fire(TimerKey("c-assign", G)))
    _settled(model, epochs)
    group = model.consumer.groups[G]
    for member in group.members.values():  # formed: each holds its target's own set, and was sent it
        assert member.reconciled.assigned is group.target[member.member_id] is member.sent
    newcomer = _answer(model, model.group_heartbeat(pb.GroupHeartbeatRequest(
        group_id=G, member_epoch=0, client_id="k"), 1))
    epochs[newcomer.member_id] = newcomer.member_epoch
    before = {m: group.target[m] for m in epochs if m in group.target}
    run(model, model.fire(TimerKey("c-assign", G)))
    untouched = [m for m, tasks in before.items() if group.target[m] is tasks]
    assert len(untouched) == 8, "30 tasks, 10 members and one more: 8 keep their 3 (and their set), 2 give one up"
    for member_id in untouched:
        answer = _beat(model, member_id, epochs[member_id])
        member = group.members[member_id]
        assert answer.member_epoch == group.target_epoch > epochs[member_id]  # the new epoch ...
        assert not answer.HasField("assignment")  # ... and no list: its tasks are the same
        assert member.reconciled.assigned is group.target[member_id] is member.sent
    _settled(model, epochs)
    group.validate()
