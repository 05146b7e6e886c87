"""The leader's half of the leader-side assignor (``client:<name>``) in the consumer member core, walked by hand.

Each row drives ``ConsumerMember.run()`` on a fake clock as a driver would; an ``Offload`` is answered with a
``concurrent.futures.Future`` the row completes when it wants the assignor's run to be over (running the job
itself, so the real ``target_answer`` decides), as the drivers' assignor thread does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from groupcoord import errors
from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, TaskReplica
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.consumer_leader import target_answer
from groupcoord.worker.consumer_member import ConsumerMember
from groupcoord.worker.effects import Call, Offload, Sleep
from tests.cli.test_parser import _outcome
from tests.worker.test_consumer_member import Clock, Walk, answer, config


class Reverse:
    """Every task to the member whose id sorts last (recognisable); records what it was given."""

    name = "reverse"

    def __init__(self) -> None:
        self.seen: list[AssignmentContext] = []

    def assign(self, context: AssignmentContext) -> Assignment:
        self.seen.append(context)
        last = context.members[-1].member_id
        every = [r for t in context.tasks for r in t.replica_ids()]
        return Assignment({m.member_id: (every if m.member_id == last else []) for m in context.members})


class Raising:
    name = "raising"

    def assign(self, context: AssignmentContext) -> Assignment:
        raise AssignorError("no room for task t3")


def lookup_of(*assignors: Any) -> Callable[[str], Any]:
    known = {a.name: a for a in assignors}

    def lookup(name: str) -> Any:
        if name not in known:
            raise LookupError(f"no assignor {name!r}")
        return known[name]
    return lookup


def request(epoch: int, assignor: str = "reverse", targets: dict[str, Sequence[str]] | None = None,
            tasks: Sequence[str] = ("t1", "t2")) -> pb.TargetRequest:
    targets = targets if targets is not None else {"m-1": ("t1", "t2"), "m-2": ()}
    asked = pb.TargetRequest(group_epoch=epoch, assignor=assignor, tasks=[pb.Task(task_id=t, replicas=1) for t in tasks])
    for member_id, held in targets.items():
        asked.members.add(member_id=member_id, assigned=[pb.TaskReplica(task_id=t) for t in held])
    return asked


def leader(clock: Clock, *assignors: Any) -> Walk:
    """A member joined at epoch 1 (nothing assigned, its first answer told): next it sleeps to its heartbeat."""
    member = ConsumerMember(config(server_assignor="client:reverse"), monotonic=clock,
                            assignor_lookup=lookup_of(*assignors))
    member.machine.fire("start")
    walk = Walk(member, member.run())
    walk.to_call()
    walk.answer(answer(1, ()))
    settle(walk)
    return walk


def settle(walk: Walk) -> None:
    """Answer ``on_joined`` and the listener's calls until the member sleeps to its next heartbeat."""
    while not isinstance(walk.effect, Sleep):
        assert not isinstance(walk.effect, (Call, Offload)), walk.effect
        walk.answer(True)


def asked(walk: Walk, target: pb.TargetRequest) -> Offload:
    """The next heartbeat's answer carries ``target``: the core hands the assignor's run to the driver."""
    walk.to_call()
    response = answer(target.group_epoch)
    response.compute_target.CopyFrom(target)
    walk.answer(response)
    assert isinstance(walk.effect, Offload), walk.effect
    return walk.effect


def run(job: Offload) -> Future[Any]:
    done: Future[Any] = Future()
    done.set_result(job.job())
    return done


def sent_target(call: Call) -> pb.TargetAnswer | None:
    beat: Any = call.request
    return beat.target if beat.HasField("target") else None


def listed(target: pb.TargetAnswer) -> dict[str, set[str]]:
    return {a.member_id: {t.task_id for t in a.tasks} for a in target.assignments}


def test_the_leader_answers_only_the_members_whose_target_changed_at_once_off_the_heartbeats() -> None:
    clock, reverse = Clock(), Reverse()
    walk = leader(clock, reverse)
    job = asked(walk, request(2))
    walk.answer(run(job))
    call = walk.to_call()  # no sleep: the finished target goes out at once
    target = sent_target(call)
    assert target is not None and target.group_epoch == 2 and not target.error
    assert listed(target) == {"m-1": set(), "m-2": {"t1", "t2"}}  # both moved; a third, unchanged, not listed
    walk.answer(answer(2))
    assert sent_target(walk.to_call()) is None  # heard: sent once
    assert reverse.seen[0].generation == 2 and reverse.seen[0].members[0].owned == (TaskReplica("t1"), TaskReplica("t2"))


def test_an_unchanged_member_is_not_listed() -> None:
    walk = leader(Clock(), Reverse())
    walk.answer(run(asked(walk, request(2, targets={"m-1": (), "m-2": (), "m-3": ("t1", "t2")}))))
    target = sent_target(walk.to_call())
    assert target is not None and target.assignments == []  # nothing changed: an empty delta, still an answer


def test_heartbeats_go_on_while_the_assignor_runs() -> None:
    clock = Clock()
    walk = leader(clock, Reverse())
    job = asked(walk, request(2))
    pending: Future[Any] = Future()
    walk.answer(pending)
    for _ in range(3):  # three intervals of heartbeats, none held, none carrying a target
        assert isinstance(walk.effect, Sleep) and walk.effect.heartbeat
        clock.now += walk.effect.seconds
        call = walk.to_call()
        assert sent_target(call) is None
        walk.answer(answer(2))
    pending.set_result(job.job())
    assert isinstance(walk.effect, Sleep)
    walk.answer()  # the driver ended the wait when the job was done
    target = sent_target(walk.to_call())
    assert target is not None and target.group_epoch == 2


def test_a_request_superseded_by_a_newer_epoch_drops_the_stale_result() -> None:
    walk = leader(Clock(), Reverse())
    first = asked(walk, request(2))
    pending: Future[Any] = Future()
    walk.answer(pending)
    walk.to_call()
    newer = answer(3)
    newer.compute_target.CopyFrom(request(3, tasks=("t1", "t2", "t9")))
    walk.answer(newer)
    assert not isinstance(walk.effect, Offload)  # one run at a time: epoch 3 waits for epoch 2's
    pending.set_result(first.job())
    walk.answer()  # woken
    second = walk.effect
    assert isinstance(second, Offload)  # epoch 2's result dropped, epoch 3's run starts
    walk.answer(run(second))
    assert sent_target(walk.to_call()) is None  # this heartbeat was on its way when the run started
    walk.answer(answer(3))
    assert isinstance(walk.effect, Call)  # the next one goes at once, with epoch 3's target only
    target = sent_target(walk.effect)
    assert target is not None and target.group_epoch == 3 and listed(target)["m-2"] == {"t1", "t2", "t9"}


def test_a_member_fenced_while_its_assignor_runs_never_sends_that_result() -> None:
    walk = leader(Clock(), Reverse())
    job = asked(walk, request(2))
    pending: Future[Any] = Future()
    walk.answer(pending)
    walk.to_call()
    walk.fail(errors.FencedMemberEpochError("fenced"))
    pending.set_result(job.job())
    join = walk.to_call()
    assert join.request.member_epoch == 0  # type: ignore[attr-defined]
    walk.answer(answer(4, ()))
    settle(walk)
    assert sent_target(walk.to_call()) is None  # it leads nothing now: the old epoch's target is gone


def test_an_assignor_that_raises_answers_its_error() -> None:
    walk = leader(Clock(), Raising())
    walk.answer(run(asked(walk, request(2, assignor="raising"))))
    target = sent_target(walk.to_call())
    assert target is not None and target.error == "AssignorError: no room for task t3" and not target.assignments


def test_an_unknown_assignor_answers_nothing_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    walk = leader(Clock(), Reverse())
    with caplog.at_level(logging.INFO, logger="groupcoord.worker"):
        walk.answer(run(asked(walk, request(2, assignor="nosuch"))))
        call = walk.to_call()
    assert sent_target(call) is None  # the coordinator falls back after 3 intervals
    lines = [r.getMessage() for r in caplog.records if "nosuch" in r.getMessage() and r.levelno >= logging.ERROR]
    assert len(lines) == 1 and "no assignor 'nosuch' in this worker" in lines[0]


def test_a_target_whose_heartbeat_failed_is_sent_again() -> None:
    clock = Clock()
    walk = leader(clock, Reverse())
    walk.answer(run(asked(walk, request(2))))
    walk.to_call()
    walk.fail(errors.CoordinatorNotAvailableError("moving"))
    target = sent_target(walk.to_call())
    assert target is not None and target.group_epoch == 2


def test_the_load_snapshot_reaches_a_load_aware_assignor() -> None:
    reverse = Reverse()
    asked_for = request(2)
    asked_for.load_snapshot.workers.add(worker_id="m-1", cpu_usage=0.75)
    answer_ = target_answer(lookup_of(reverse), "g", asked_for)
    assert answer_ is not None
    snapshot = reverse.seen[0].load_snapshot
    assert snapshot is not None and snapshot.workers["m-1"].cpu_usage == pytest.approx(0.75)


# ------------------------------------------------------------------ bad settings


def test_client_with_no_name_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="server_assignor 'client:' names no assignor"):
        config(server_assignor="client:")


def test_a_leader_side_assignor_this_worker_lacks_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = _outcome(capsys, "worker", "--group", "g", "--coordinator", "127.0.0.1:9400", "--protocol",
                           "consumer", "--server-assignor", "client:no-such-assignor")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("groupcoord worker: no assignor named 'no-such-assignor'; known:")
