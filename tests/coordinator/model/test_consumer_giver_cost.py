"""What a member giving tasks up costs the coordinator (issue 34's 1,000-member row: each change moves
100 tasks from 100 members, each heartbeating with a 100-task ``owned`` list): a list that is the
member's last assignment as sent is taken as that set, without building one, and any list is read
once per heartbeat; a bad task anywhere in a long list is named in a specific error."""

from __future__ import annotations

import pytest

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import consumer
from groupcoord.coordinator.model.consumer_checks import owned_of, request_error
from groupcoord.coordinator.model.reconcile import MemberState
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G, heartbeat
from tests.coordinator.model.test_consumer_protocol import fleet

CONFIG = CoordinatorConfig()


def owning(*tasks: pb.TaskReplica) -> pb.GroupHeartbeatRequest:
    request = pb.GroupHeartbeatRequest(group_id=G, member_id="m", member_epoch=3)
    request.owned.SetInParent()
    request.owned.tasks.extend(tasks)
    return request


def hundred() -> list[pb.TaskReplica]:
    return [pb.TaskReplica(task_id=f"task-{i:03d}", replica=i % 3) for i in range(100)]


def test_a_long_valid_owned_list_passes() -> None:
    assert request_error(CONFIG, owning(*hundred())) is None
    assert request_error(CONFIG, owning()) is None


@pytest.mark.parametrize(("bad", "named"), [
    (pb.TaskReplica(task_id="", replica=0), "task '' replica 0"),
    (pb.TaskReplica(task_id="t-neg", replica=-1), "replica -1"),
    (pb.TaskReplica(task_id="t-high", replica=CONFIG.max_replicas), f"replica {CONFIG.max_replicas}"),
    (pb.TaskReplica(task_id="x" * (CONFIG.max_id_length + 1), replica=0), "max_id_length"),
    (pb.TaskReplica(task_id="t\x07bell", replica=0), "printable"),
], ids=["empty id", "negative replica", "replica past max_replicas", "id too long", "control character"])
def test_one_bad_task_in_a_long_owned_list_is_named(bad: pb.TaskReplica, named: str) -> None:
    tasks = hundred()
    tasks[57] = bad  # in the middle: the whole-list check fails, the loop finds which
    failure = request_error(CONFIG, owning(*tasks))
    assert failure is not None and failure.code == pb.INVALID_REQUEST
    assert failure.message.startswith("owned") and named in failure.message, failure.message


def sorted_owned(f: Fleet, name: str, tasks: set[TaskReplica]) -> pb.GroupHeartbeatRequest:
    """A heartbeat saying the member runs ``tasks``, listed sorted (as the worker lists them)."""
    m = f.members[name]
    request = pb.GroupHeartbeatRequest(group_id=G, member_id=m.member_id, member_epoch=m.epoch)
    request.owned.SetInParent()
    request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in sorted(tasks))
    return request


def test_an_owned_list_that_is_the_last_assignment_sent_is_that_set() -> None:
    f = fleet("ab", tasks=8)
    f.join("a")
    f.join("b")
    f.settle()
    member = f.h.model.consumer.groups[G].members[f.members["a"].member_id]
    assert member.sent_wire is not None
    sent = member.sent_wire[1]
    assert owned_of(sorted_owned(f, "a", set(sent)), member.sent_wire) is sent  # no set built
    reordered = sorted_owned(f, "a", set(sent))
    reordered.owned.tasks.reverse()
    assert owned_of(reordered, member.sent_wire) == sent  # another order: built, the same set
    one_less = set(sent) - {min(sent)}
    other = TaskReplica("t-unknown")
    assert owned_of(sorted_owned(f, "a", one_less), member.sent_wire) == one_less
    assert owned_of(sorted_owned(f, "a", one_less | {other}), member.sent_wire) == one_less | {other}
    empty = sorted_owned(f, "a", set())
    assert owned_of(empty, member.sent_wire) == frozenset() and owned_of(empty, (b"", frozenset())) == frozenset()


def test_givers_saying_they_run_what_they_were_sent_release_their_tasks_to_a_newcomer() -> None:
    """The whole walk with the lists as the worker sends them (sorted: the shortcut taken each time):
    the givers give up, the newcomer gets what they released and nothing is run twice."""
    f = fleet("abc", tasks=12)
    for name in "ab":
        f.join(name)
    f.settle()
    f.join("c")
    f.h.advance(0.2)  # the new target
    group = f.h.model.consumer.groups[G]
    for _ in range(4):
        for name in "abc":
            m = f.members[name]
            answer = heartbeat(f.h, sorted_owned(f, name, m.running)).response
            f._apply(m, answer)
            f.assert_no_task_run_twice()
        f.h.advance(0.2)
    running = f.running()
    assert {len(tasks) for tasks in running.values()} == {4}
    assert set().union(*running.values()) == {TaskReplica(f"t{i}") for i in range(12)}
    assert all(m.reconciled.state is MemberState.STABLE for m in group.members.values())
    group.validate()


def test_a_heartbeat_reads_its_owned_list_once(monkeypatch: pytest.MonkeyPatch) -> None:
    f = fleet("ab", tasks=8)
    f.join("a")
    f.join("b")
    f.settle()
    reads: list[int] = []
    real = owned_of

    def counted(request: pb.GroupHeartbeatRequest, sent: object = None) -> object:
        reads.append(len(request.owned.tasks))
        return real(request, sent)  # type: ignore[arg-type]

    monkeypatch.setattr(consumer, "owned_of", counted)
    answer = f.beat("a")  # reports what it runs (4 tasks)
    assert answer.error.code == pb.NONE
    assert reads == [4]
    f.assert_no_task_run_twice()
