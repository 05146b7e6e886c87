"""A split's children wait for the parent's release (issue 34), on the model and a fake clock.

As Pulsar unloads a bundle before its children are owned anywhere, a child replica counts as held by
whoever holds the same replica of its parent until that member's heartbeat no longer lists the parent
(or its session ends): one hash range is never run by two members. The members here are the
simulated clients of ``consumer_sim``; the check below reads what they run, not the coordinator's view.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica, TaskSpec, TaskSplit
from groupcoord.assignors.registry import register
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.coordinator.model.split_lineage import children_of, parent_holder, recorded
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import SESSION_MS, Fleet, G

NAME = "test-splitter"


class Splitter:
    """Round-robin over the catalog after splitting each task named in ``hot`` into ``<id>/a`` and ``<id>/b``."""

    name = NAME

    def __init__(self) -> None:
        self.hot: set[str] = set()

    def assign(self, context: AssignmentContext) -> Assignment:
        tasks: list[TaskSpec] = []
        splits: list[TaskSplit] = []
        for task in context.tasks:
            if task.task_id in self.hot:
                children = tuple(TaskSpec(f"{task.task_id}/{half}", replicas=task.replicas) for half in "ab")
                splits.append(TaskSplit(task.task_id, children))
                tasks += children
            else:
                tasks.append(task)
        members = sorted(m.member_id for m in context.members)
        dealt: dict[str, list[TaskReplica]] = {m: [] for m in members}
        replicas = [r for t in sorted(tasks, key=lambda t: t.task_id) for r in t.replica_ids()]
        for i, replica in enumerate(replicas):
            dealt[members[i % len(members)]].append(replica)
        return Assignment(members=dealt, splits=splits)


@pytest.fixture
def splitter() -> Iterator[Splitter]:
    assignor = Splitter()
    register(assignor, replace=True)
    yield assignor


def ancestors(task: TaskReplica) -> list[TaskReplica]:
    parts = task.task_id.split("/")
    return [TaskReplica("/".join(parts[:k]), task.replica) for k in range(1, len(parts))]


def assert_no_range_twice(f: Fleet) -> None:
    """No replica on two members, and no member running a child while another runs its parent (or an older
    ancestor): what the members run, as they run it."""
    f.assert_no_task_run_twice()
    running = f.running()
    for name, tasks in running.items():
        for task in tasks:
            for ancestor in ancestors(task):
                others = [o for o, theirs in running.items() if o != name and ancestor in theirs]
                assert not others, f"{task} on {name} while {others} run {ancestor}"


def formed(splitter: Splitter, h: Harness | None = None) -> tuple[Fleet, str, str]:
    """a and b running p and q (one each); the names of p's runner and of the other."""
    h = h or Harness(CoordinatorConfig())
    assert h.put_tasks(G, "p", "q") == pb.NONE
    f = Fleet(h, ["a", "b"])
    f.join("a", assignor=NAME)
    f.join("b", assignor=NAME)
    f.settle()
    [owner] = [n for n, tasks in f.running().items() if TaskReplica("p") in tasks]
    return f, owner, "b" if owner == "a" else "a"


def split_p(f: Fleet, splitter: Splitter) -> set[TaskReplica]:
    """The next target splits p (a catalog edit moves the epoch); its children."""
    splitter.hot.add("p")
    assert f.h.put_tasks(G, "r") == pb.NONE
    f.h.advance(0.2)  # the target is computed (off the step) and lands
    assert set(f.h.model.groups[G].tasks) == {"p/a", "p/b", "q", "r"}
    return {TaskReplica("p/a"), TaskReplica("p/b")}


def waits(f: Fleet, name: str) -> bool:
    group = f.h.model.consumer.groups[G]
    member = group.members[f.members[name].member_id]
    return member.reconciled.state is MemberState.UNRELEASED_TASKS and bool(group.waiting_for[member.member_id])


def test_a_child_waits_while_the_parents_owner_still_lists_the_parent(splitter: Splitter) -> None:
    f, owner, other = formed(splitter)
    children = split_p(f, splitter)
    for _ in range(5):  # the owner's answers are lost: it goes on running p and listing it
        f.h.advance(0.2)
        f.beat(owner, lose_answer=True)
        f.beat(other)
        assert not f.members[other].running & children and TaskReplica("p") in f.members[owner].running
        assert_no_range_twice(f)
    assert waits(f, other)  # what DescribeGroup shows as tasks waiting to be released
    f.beat(owner)  # the owner hears its answer and stops p...
    assert TaskReplica("p") not in f.members[owner].running
    f.beat(owner)  # ...and says so: the waiting member is to be told at once (the stream's news)
    assert f.members[other].member_id in f.h.model.consumer.groups[G].unblocked
    for _ in range(3):
        f.h.advance(0.2)
        f.beat(owner)
        f.beat(other)
        assert_no_range_twice(f)
    assert children <= f.members[owner].running | f.members[other].running
    assert f.members[other].running & children and TaskReplica("p") not in f.members[owner].running
    assert f.h.model.consumer.groups[G].split_from == {}  # nobody holds p: the lineage is forgotten


def test_a_child_is_given_once_the_parents_owner_is_gone(splitter: Splitter) -> None:
    f, owner, other = formed(splitter)
    children = split_p(f, splitter)
    for _ in range(40):  # the owner is silent (8 s, its session is 6 s); the other goes on, and waits
        f.h.advance(0.2)
        f.expire_silent()
        f.beat(other)
        assert_no_range_twice(f)
        if f.members[other].running & children:
            break
    assert not f.members[owner].joined  # its rebalance timeout ended it (and it stopped by itself)
    f.settle()
    assert children <= f.members[other].running


def test_the_wait_survives_a_restart(splitter: Splitter, tmp_path: Path) -> None:
    path = tmp_path / "groups.db"
    store = SqliteStore(path)
    f, owner, other = formed(splitter, Harness(CoordinatorConfig(), store=store))
    children = split_p(f, splitter)
    f.beat(owner, lose_answer=True)
    f.beat(other)
    store.close()
    f.h = Harness(CoordinatorConfig(), store=SqliteStore(path))
    assert f.h.runtime.load() == 1
    assert f.h.model.consumer.groups[G].split_from == {"p/a": "p", "p/b": "p"}
    for _ in range(3):
        f.h.advance(0.2)
        f.beat(owner, lose_answer=True)
        f.beat(other)
        assert not f.members[other].running & children
        assert_no_range_twice(f)
    f.settle()
    assert children <= f.members[owner].running | f.members[other].running


def test_the_lineage_rules() -> None:
    holder = {TaskReplica("p", 1): "m1", TaskReplica("x", 0): "m2"}
    lineage = {"p/a": "p", "p/a/1": "p/a", "x/a": "x"}
    assert parent_holder(lineage, holder, TaskReplica("p/a", 1)) == "m1"
    assert parent_holder(lineage, holder, TaskReplica("p/a/1", 1)) == "m1"  # a grandchild: its grandparent's
    assert parent_holder(lineage, holder, TaskReplica("p/a", 0)) is None  # another replica: free
    assert parent_holder({"a": "b", "b": "a"}, {}, TaskReplica("a")) is None  # a loop ends
    assert sorted(children_of(lineage, "p")) == ["p/a", "p/a/1"]
    split = pb.TaskSplit(parent_task_id="y", children=[pb.Task(task_id="y/a")])
    assert recorded(lineage, [split], {TaskReplica("p", 1): "m1"}) == {"p/a": "p", "p/a/1": "p/a"}  # x, y: not held
    assert recorded({}, [split], {TaskReplica("y", 0): "m"}) == {"y/a": "y"}


OPS = st.lists(st.tuples(st.sampled_from(["join", "beat", "beat", "beat", "lose", "silent", "leave", "advance",
                                          "split"]),
                         st.integers(0, 2), st.floats(0.01, 7.0)), min_size=1, max_size=40)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
# b's last answer lost: b stops by itself a session after the answer before it, while the coordinator counts
# its session from the heartbeat it did get; a's share grows only once that session ends on the coordinator
@example(ops=[("advance", 0, 5.0), ("beat", 0, 1.0), ("lose", 1, 1.0)])
def test_no_range_is_run_twice_whatever_the_order(ops: list[tuple[str, int, float]]) -> None:
    splitter = Splitter()
    register(splitter, replace=True)
    h = Harness(CoordinatorConfig())
    assert h.put_tasks(G, "t0", "t1", "t2") == pb.NONE
    f = Fleet(h, ["a", "b", "c"])
    for name in ("a", "b"):  # two members running the catalog to start from: the ops can split at once
        f.join(name, assignor=NAME)
    f.settle()
    filler = 0
    for op, who, seconds in ops:
        name = list(f.members)[who]
        m = f.members[name]
        if op == "join" and not m.joined:
            f.join(name, assignor=NAME)
        elif op in ("beat", "lose", "silent") and m.joined:
            f.beat(name, lose_answer=op == "lose", report=op != "silent")
        elif op == "leave" and m.joined:
            f.leave(name)
        elif op == "advance":
            f.h.advance(seconds)
            f.expire_silent()
        elif op == "split":  # a task of the catalog (maybe a child) is split by the next target
            catalog = sorted(h.model.groups[G].tasks)
            splitter.hot.add(catalog[who % len(catalog)])
            filler += 1
            h.put_tasks(G, f"f{filler}")
        assert_no_range_twice(f)  # the Harness also checks the model's invariants (validate) each step
    # Past a session and a half after the last op: a member that stopped by itself (its answers lost) is still
    # counted by the coordinator until the session of the last heartbeat it received ends, then its tasks move.
    for _ in range(SESSION_MS * 3 // 2 // 1000):
        f.h.advance(1.0)
        f.expire_silent()
        f.settle(rounds=4)
        assert_no_range_twice(f)
    live = [m for m in f.members.values() if m.joined]
    if live:
        assert sum(len(m.running) for m in live) == len(h.model.groups[G].tasks)


def classic_round(h: Harness, member_id: str, running: set[str]) -> set[str]:
    """A classic member of the converted group rejoins listing what it runs, syncs, and runs what it is given."""
    metadata = pb.MemberMetadata(owned=[pb.TaskReplica(task_id=t) for t in sorted(running)])
    join = h.join(G, member_id, protocols=(NAME,), client_id="w", metadata=metadata)
    assert join.code == pb.NONE, join.response
    sync = h.sync(G, member_id, join.response.generation)
    assert sync.code == pb.NONE, sync.response
    return {t.task_id for t in sync.response.tasks}


def test_a_classic_member_of_a_converted_group_waits_for_the_child_too(splitter: Splitter) -> None:
    h = Harness(CoordinatorConfig())
    assert h.put_tasks(G, "p", "q") == pb.NONE
    f = Fleet(h, ["a"])
    f.join("a", assignor=NAME)
    f.settle()
    joined = h.join(G, protocols=(NAME,), client_id="w")  # a classic member: the group is converted already
    classic, running = joined.response.member_id, set()
    assert classic > f.members["a"].member_id  # sorted after a: the splitter gives it q, then p/b and r
    for _ in range(4):
        f.h.advance(0.2)
        f.beat("a")
        running = classic_round(h, classic, running)
    assert running == {"q"} and {t.task_id for t in f.members["a"].running} == {"p"}
    split_p(f, splitter)
    for _ in range(4):  # a goes on running p (its answers lost); the classic member rejoins and syncs
        f.h.advance(0.2)
        f.beat("a", lose_answer=True)
        running = classic_round(h, classic, running)
        assert "p/b" not in running
    for _ in range(4):
        f.h.advance(0.2)
        f.beat("a")
        running = classic_round(h, classic, running)
        assert not ({"p/b"} & running and TaskReplica("p") in f.members["a"].running)
    assert running == {"p/b", "r"} and {t.task_id for t in f.members["a"].running} == {"p/a", "q"}
