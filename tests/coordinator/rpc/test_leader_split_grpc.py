"""A leader's split in its ``TargetAnswer`` over a real gRPC server: raw-stub members of a
``client:round-robin`` group, one of them the leader, answering by hand; the server's timers on an
injected clock. The split's children wait for the parent's owner to let the parent go, and each
malformed split is refused (the coordinator's own round-robin computes the target, the catalog
unchanged)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
import pytest

from groupcoord.cli import main
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.coordinator.rpc.raw_member import RawMember
from tests.zookeeper_server import wait_until

G = "g"
P1, P2 = "p/0x00000000_0x80000000", "p/0x80000000_0x100000000"


def answer(asked: pb.TargetRequest, targets: dict[str, list[str]],
           splits: dict[str, list[str]] | None = None) -> pb.TargetAnswer:
    """The leader's answer: ``targets`` member id -> task ids; ``splits`` parent -> child ids (a hash range each)."""
    reply = pb.TargetAnswer(group_epoch=asked.group_epoch)
    for member_id, tasks in targets.items():
        reply.assignments.add(member_id=member_id, tasks=[pb.TaskReplica(task_id=t) for t in tasks])
    for parent, children in (splits or {}).items():
        reply.splits.add(parent_task_id=parent, children=[pb.Task(task_id=c) for c in children])
    return reply


@dataclass
class Group:
    """Two raw members over one server: ``a`` (the leader) runs ``p``, ``b`` runs ``q``."""

    thread: ServerThread
    clock: FakeClock
    admin: pb_grpc.GroupAdminStub
    a: RawMember
    b: RawMember

    def advance(self, seconds: float = 0.2) -> None:
        self.thread.call(lambda: (self.clock.advance(seconds), self.thread.runtime.poll_timers()))

    def beat_all(self) -> None:
        self.advance()
        self.a.beat()
        self.b.beat()
        assert not (self.a.running | self.a.holding) & (self.b.running | self.b.holding)  # nothing on both

    def catalog(self) -> tuple[set[str], int]:
        classic = self.thread.call(lambda: self.thread.runtime.model.groups[G])
        return self.thread.call(lambda: (set(classic.tasks), classic.catalog_version))

    def ask_leader(self) -> pb.TargetRequest:
        """A catalog edit moves the epoch: the leader is asked (in its next heartbeat answer)."""
        self.admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="r")]), timeout=10)
        self.a.asked = None
        self.advance()
        self.a.beat()
        assert self.a.asked is not None
        return self.a.asked


@pytest.fixture
def group() -> Iterator[Group]:
    with dealt_group() as formed:
        yield formed


@contextmanager
def dealt_group() -> Iterator[Group]:
    """The two members with p on a and q on b, the target current (the console's browser test uses it too)."""
    clock = FakeClock()
    config = CoordinatorConfig(max_splits_per_sync=1)
    runtime = CoordinatorRuntime(config, clock=clock, on_change=lambda g: g.validate())
    with ServerThread(runtime) as thread, grpc.insecure_channel(thread.address) as channel:
        admin, stub = pb_grpc.GroupAdminStub(channel), pb_grpc.GroupCoordinatorStub(channel)
        admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="p"), pb.Task(task_id="q")]), timeout=10)
        a, b = RawMember(stub, "a", session_timeout_ms=60_000, rebalance_timeout_ms=60_000), RawMember(stub, "b", session_timeout_ms=60_000, rebalance_timeout_ms=60_000)
        a.join(), b.join()
        formed = Group(thread, clock, admin, a, b)

        def dealt() -> bool:
            """The leader answers every epoch it is asked (p to a, q to b) until the target is current."""
            if a.asked is not None:
                asked, a.asked = a.asked, None
                a.beat(answer(asked, {a.member_id: ["p"], b.member_id: ["q"]}))
            formed.beat_all()
            consumer = thread.call(lambda: runtime.model.consumer.groups[G])
            current = thread.call(lambda: consumer.target_epoch == consumer.epoch and not consumer.computing)
            return current and a.running == {"p"} and b.running == {"q"}

        wait_until(dealt, 10, "p on a, q on b")
        yield formed


def test_a_split_child_waits_until_the_parents_owner_lets_the_parent_go(group: Group,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    a, b = group.a, group.b
    asked = group.ask_leader()
    a.holding = {"p"}  # a goes on running the parent past the answer that takes it away
    a.beat(answer(asked, {a.member_id: ["r"], b.member_id: ["q", P1, P2]}, {"p": [P1, P2]}))
    assert group.catalog()[0] == {"q", "r", P1, P2}  # the split is in the catalog, without a fallback
    for _ in range(5):  # however often both beat, no child while a still lists the parent
        group.beat_all()
        assert b.running == {"q"} and a.running == set()
    described = group.admin.DescribeGroup(pb.DescribeGroupRequest(group_id=G), timeout=10)
    assert not described.last_error
    a.holding = set()  # a stops the parent: its next heartbeat says so
    wait_until(lambda: (group.beat_all(), b.running == {"q", P1, P2} and a.running == {"r"})[1], 10,
               "the children on b once a let p go")
    assert [r for r in caplog.records if getattr(r, "event", "") == "leader_target_failed"] == []


def test_describe_names_the_parent_a_waiting_child_waits_for(group: Group, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = group.a, group.b
    asked = group.ask_leader()
    a.holding = {"p"}
    a.beat(answer(asked, {a.member_id: ["r"], b.member_id: ["q", P1, P2]}, {"p": [P1, P2]}))
    group.beat_all()
    described = group.admin.DescribeGroup(pb.DescribeGroupRequest(group_id=G), timeout=10)
    waits = {m.member.member_id: [(w.child.task_id, w.parent.task_id, w.held_by) for w in m.consumer.split_waits]
             for m in described.members}
    assert waits == {a.member_id: [], b.member_id: [(P1, "p", a.member_id), (P2, "p", a.member_id)]}
    assert main(["groups", "describe", "--group", G, "--json", "--coordinator", group.thread.address]) == 0
    members = {m["member_id"]: m for m in json.loads(capsys.readouterr().out)["members"]}
    assert members[b.member_id]["waiting"] == [P1, P2]
    assert members[b.member_id]["waiting_for_parent"] == [{"task": P1, "parent": "p", "held_by": a.member_id},
                                                          {"task": P2, "parent": "p", "held_by": a.member_id}]
    assert main(["groups", "describe", "--group", G, "--wide", "--coordinator", group.thread.address]) == 0
    assert f"{P1}(after p) {P2}(after p)" in capsys.readouterr().out
    a.holding = set()  # released: the children are given, nobody waits for a parent
    wait_until(lambda: (group.beat_all(), b.running == {"q", P1, P2})[1], 10, "the children on b")
    described = group.admin.DescribeGroup(pb.DescribeGroupRequest(group_id=G), timeout=10)
    assert [w for m in described.members for w in m.consumer.split_waits] == []


CASES = {  # name -> (split, targets by member name, the refusal's words)
    "unknown parent": ({"nope": ["nope/1"]}, {"a": ["nope/1", "p"]}, "split of unknown task 'nope'"),
    "child id in use": ({"p": ["q"]}, {"a": ["r"]}, "child id 'q' is empty or already in use"),
    "no children": ({"p": []}, {"a": ["r"]}, "split of 'p' has no children"),
    "children not covering": ({"p": [P1, P2]}, {"a": [P1, "r"]},
                              f"children not covering it, {P2}#0 is given to no member"),
    "parent kept": ({"p": [P1, P2]}, {"b": ["q", "r", P1, P2]}, "p#0 stays with"),
    "child id unprintable": ({"p": ["p/\x01", P2]}, {"a": ["p/\x01", P2, "r"]},
                             "split child id 'p/\\x01' must be non-empty, printable, at most 255 characters"),
    "over the bounds": ({"p": [P1, P2], "q": ["q/1", "q/2"]}, {"a": [P1, P2], "b": ["q/1", "q/2", "r"]},
                        "2 splits; at most 1 (max_splits_per_sync)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_leader_split_is_refused_and_the_catalog_unchanged(
        case: str, group: Group, caplog: pytest.LogCaptureFixture) -> None:
    splits, targets, words = CASES[case]
    a, b = group.a, group.b
    asked = group.ask_leader()
    before = group.catalog()
    ids = {"a": a.member_id, "b": b.member_id}
    with caplog.at_level(logging.WARNING, logger="groupcoord.consumer"):
        a.beat(answer(asked, {ids[n]: tasks for n, tasks in targets.items()}, splits))
        failed = [r for r in caplog.records if getattr(r, "event", "") == "leader_target_failed"]
    assert len(failed) == 1 and words in failed[0].getMessage(), [r.getMessage() for r in failed]
    assert failed[0].getMessage().startswith(f"group {G}: no target from the leader")
    assert group.catalog() == before == ({"p", "q", "r"}, before[1])  # nothing of the split applied
    assert group.thread.call(lambda: group.thread.runtime.model.consumer.groups[G].failed_leader) == a.member_id
    wait_until(lambda: (group.beat_all(), a.running | b.running == {"p", "q", "r"})[1], 10,
               "the coordinator's own round-robin places the catalog as it is")


def test_a_leader_split_computed_before_a_catalog_edit_is_refused(group: Group,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    a, b = group.a, group.b
    asked = group.ask_leader()
    group.admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="s")]), timeout=10)  # meanwhile
    before = group.catalog()
    a.beat(answer(asked, {a.member_id: ["r"], b.member_id: ["q", P1, P2]}, {"p": [P1, P2]}))
    failed = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "leader_target_failed"]
    assert len(failed) == 1 and "split of p not applied: the catalog changed while the target was computed" in failed[0]
    assert group.catalog() == before and "p" in before[0]
    wait_until(lambda: (group.beat_all(), a.running | b.running == {"p", "q", "r", "s"})[1], 10, "the fallback")
