"""A SQLite-backed coordinator restarted mid-life resumes a consumer group with its epochs: members
written per record, and members that took a target epoch without a write (their tasks the same), whose
record implies it. No member is fenced by the restart, whichever of the two epochs it heard last."""

from __future__ import annotations

from pathlib import Path

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G


def test_a_restart_keeps_every_epoch_whether_written_or_implied(tmp_path: Path) -> None:
    path = tmp_path / "groups.db"
    first = SqliteStore(path)
    h = Harness(CoordinatorConfig(), store=first)
    assert h.put_tasks(G, *(f"t{i}" for i in range(8))) == pb.NONE
    f = Fleet(h, ["a", "b", "c", "d", "e"])
    for name in "abcd":
        f.join(name)
    f.settle()
    f.join("e")  # takes two tasks; sticky leaves two of a..d their tasks, who take the new epoch alone
    f.settle()
    group = h.model.consumer.groups[G]
    stored = first.load_all()[G]["parts"]
    epochs = {n: (m.epoch, stored[f"m:{m.member_id}"]["epoch"]) for n, m in f.members.items()}
    implied = [n for n, (now, written) in epochs.items() if written < now]
    assert implied and all(epochs[n][0] == group.target_epoch for n in f.members), epochs
    before = {i: (m.reconciled.state, m.epoch, m.reconciled.assigned) for i, m in group.members.items()}

    first.close()  # the process stops
    f.h = again = Harness(CoordinatorConfig(), store=SqliteStore(path))
    assert again.runtime.load() == 1
    after = {i: (m.reconciled.state, m.epoch, m.reconciled.assigned)
             for i, m in again.model.consumer.groups[G].members.items()}
    assert after == before
    lagging = f.members[implied[0]]
    lagging.epoch = epochs[implied[0]][1]  # it never heard the epoch it took: its record's is accepted too
    for name in f.members:
        answer = f.beat(name)
        assert answer.error.code == pb.NONE and answer.member_epoch == before[f.members[name].member_id][1]
    assert sum(map(len, f.running().values())) == 8
    f.assert_no_task_run_twice()
    lagging.epoch += 1  # an epoch the coordinator never gave: fenced, as before
    assert f.beat(implied[0]).error.code == pb.FENCED_MEMBER_EPOCH
