"""Consumer-protocol news on the Session stream once a change's tasks free up (issue 34's 0.5 s): a member
waiting for tasks another member held (UNRELEASED_TASKS) is told the moment they are let go, once, rather
than learning it at its next heartbeat; a member the new target does not touch is told nothing (it takes
the new epoch at its next heartbeat, as in Kafka)."""

from __future__ import annotations

from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.coordinator.rpc.session_registry import SessionRegistry
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G
from tests.coordinator.rpc.test_session_catch_up import Recorder, _target_landed


def _kinds(stream: Recorder) -> list[str]:
    return [str(news.WhichOneof("news")) for news in stream.told]


def _stable(h: Harness, names: list[str], tasks: int) -> tuple[Fleet, SessionRegistry, dict[str, Recorder]]:
    """``names`` running ``tasks`` tasks between them, each on a stream of its own."""
    registry = SessionRegistry(ShardRouter([h.runtime]))
    assert h.put_tasks(G, *(f"t{i}" for i in range(tasks))) == pb.NONE
    fleet = Fleet(h, names + ["new"])
    for name in names:
        fleet.join(name)
    _target_landed(h, fleet)
    fleet.settle(3)
    assert sum(len(t) for t in fleet.running().values()) == tasks
    streams = {name: Recorder() for name in names + ["new"]}
    for name in names:
        registry.carry((G, fleet.members[name].member_id), streams[name])
    for stream in streams.values():
        stream.told.clear()
    return fleet, registry, streams


def test_a_newcomer_waiting_for_tasks_is_told_once_they_are_let_go() -> None:
    h = Harness()
    fleet, registry, streams = _stable(h, ["a"], 4)
    joined = fleet.join("new")
    registry.carry((G, joined.member_id), streams["new"])
    _target_landed(h, fleet)
    assert _kinds(streams["a"]) == ["tasks_to_give_up"] and _kinds(streams["new"]) == ["assignment_changed"]
    fleet.beat("new")  # told: its target is all a's still: it waits
    group = h.model.consumer.groups[G]
    assert group.members[joined.member_id].reconciled.state is MemberState.UNRELEASED_TASKS
    registry.changed(h.runtime, h.group(G))
    assert _kinds(streams["new"]) == ["assignment_changed"]  # nothing let go yet: nothing more to say
    fleet.beat("a")  # its answer takes two tasks from it
    fleet.beat("a")  # and this one says it stopped them
    assert len(fleet.running()["a"]) == 2
    registry.changed(h.runtime, h.group(G))
    registry.changed(h.runtime, h.group(G))  # another write of the group: not told twice
    assert _kinds(streams["new"]) == ["assignment_changed", "assignment_changed"]
    assert streams["new"].told[-1].assignment_changed.member_epoch == group.target_epoch
    fleet.beat("new")  # what the news asks for: it takes them now, no interval later
    assert len(fleet.running()["new"]) == 2 and not group.unblocked
    fleet.assert_no_task_run_twice()
    group.validate()


def test_members_the_new_target_does_not_touch_are_told_nothing() -> None:
    h = Harness()
    fleet, registry, streams = _stable(h, ["a", "b", "c"], 9)
    before = {name: set(tasks) for name, tasks in fleet.running().items()}
    joined = fleet.join("new")
    registry.carry((G, joined.member_id), streams["new"])
    group = _target_landed(h, fleet)
    targets = {name: group.target_of(fleet.members[name].member_id) for name in ("a", "b", "c")}
    untouched = [name for name in ("a", "b", "c") if targets[name] == before[name]]
    touched = [name for name in ("a", "b", "c") if targets[name] != before[name]]
    assert untouched and touched, (before, targets)  # 9 tasks over 4: one keeps its 3
    for name in untouched:
        assert group.members[fleet.members[name].member_id].epoch < group.target_epoch  # behind, and yet
        assert streams[name].told == []
    for name in touched:
        assert _kinds(streams[name]) == ["tasks_to_give_up"]
