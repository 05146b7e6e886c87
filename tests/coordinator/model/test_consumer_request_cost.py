"""A consumer-protocol request costs O(1) in the group's size: counted, not timed.

The members of a group of 2,000 report every read; a join, a heartbeat (with or without a change of
target), a static leave and a leave touch only their own member and iterate no member table. Only
the target's computation (once per group per interval, not per request) reads every member.

A request that changes a member's state writes that member's record only (per-member records,
``consumer_records``): the group's own record is not rewritten when it did not change, and no other
member is read. A heartbeat that changes nothing writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.model.consumer_group import ConsumerMember
from groupcoord.coordinator.model.effects import Effect, Offload, Persist, Reply, TimerKey
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"
N = 2_000
BOUND = 2


class Meter:
    def __init__(self) -> None:
        self.touched: set[int] = set()
        self.iterated = 0


def run(model: CoordinatorModel, effects: list[Effect]) -> list[Reply]:
    """Carry out offloaded work inline, as the runtime does without a loop; the replies."""
    replies = []
    for effect in effects:
        if isinstance(effect, Offload):
            replies += run(model, effect.then(effect.job()))
        elif isinstance(effect, Reply):
            replies.append(effect)
    return replies


def beat(model: CoordinatorModel, **fields: Any) -> pb.GroupHeartbeatResponse:
    request = pb.GroupHeartbeatRequest(group_id=G, **fields)
    [reply] = run(model, model.group_heartbeat(request, 1))
    response: pb.GroupHeartbeatResponse = reply.response  # type: ignore[assignment]
    assert response.error.code == pb.NONE, response.error
    return response


def instrument(model: CoordinatorModel, meter: Meter) -> None:
    class CountedMember(ConsumerMember):
        def __getattribute__(self, name: str) -> Any:
            meter.touched.add(id(self))
            return object.__getattribute__(self, name)

    class CountedTable(dict[str, ConsumerMember]):
        def __iter__(self) -> Iterator[str]:
            meter.iterated += len(self)
            return super().__iter__()

        def values(self) -> Any:
            meter.iterated += len(self)
            return super().values()

    group = model.consumer.groups[G]
    for member in group.members.values():
        member.__class__ = CountedMember
    group.members = CountedTable(group.members)


def test_each_request_touches_its_own_member_only_in_a_group_of_2000() -> None:
    model = CoordinatorModel(clock=FakeClock())
    model.put_tasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=f"t{i}") for i in range(N)]), 1)
    ids = [beat(model, member_epoch=0, client_id=f"w{i}", instance_id=f"i{i}", assignor="round-robin").member_id
           for i in range(N)]
    run(model, model.fire(TimerKey("c-assign", G)))  # the target, once
    group = model.consumer.groups[G]
    assert group.target_epoch == group.epoch and len(group.target) == N
    meter = Meter()
    instrument(model, meter)

    def cost(**fields: Any) -> tuple[int, int]:
        meter.touched.clear()
        meter.iterated = 0
        beat(model, **fields)
        return len(meter.touched), meter.iterated

    def writes(**fields: Any) -> list[Persist]:
        request = pb.GroupHeartbeatRequest(group_id=G, **fields)
        return [e for e in model.group_heartbeat(request, 1) if isinstance(e, Persist)]

    first = group.members[ids[0]]
    assert cost(member_id=ids[0], member_epoch=first.epoch) == (1, 0)  # reconciled to the target: its task
    assert len(first.reconciled.assigned) == 1
    assert cost(member_id=ids[0], member_epoch=first.epoch) == (1, 0)  # a plain heartbeat
    assert writes(member_id=ids[0], member_epoch=first.epoch) == []  # ... writes nothing
    second = group.members[ids[3]]
    [write] = writes(member_id=ids[3], member_epoch=second.epoch)  # reconciled: its own record, no other
    assert write.record is None and write.parts is not None and set(write.parts) == {f"m:{ids[3]}"}
    assert cost(member_epoch=0, client_id="new", assignor="round-robin")[0] <= BOUND  # a join
    assert cost(member_id=ids[1], member_epoch=-2, instance_id="i1") == (1, 0)  # a static member away
    assert cost(member_id=ids[2], member_epoch=-1)[0] <= BOUND  # a leave
    model.validate()
