"""The consumer protocol's reconciliation (``coordinator.model.reconcile``), one case per row of its
table, as Kafka's CurrentAssignmentBuilderTest walks its builder: sets in, the next state out."""

from __future__ import annotations

import pytest

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.reconcile import TABLE, MemberState, Reconciled, reconcile

S = MemberState
T1, T2, T3, T4 = (TaskReplica(f"t{i}") for i in range(1, 5))


def nobody(_task: TaskReplica) -> bool:
    return False


def held(*tasks: TaskReplica):  # type: ignore[no-untyped-def]
    return lambda task: task in tasks


# (row of TABLE it exercises, case name, current, target epoch, target, owned, held elsewhere, expected)
CASES = [
    (0, "stable at the target stays", Reconciled(S.STABLE, 5, frozenset({T1})), 5, {T1, T2}, None, nobody,
     Reconciled(S.STABLE, 5, frozenset({T1}))),
    (1, "behind, only gains: stable at the target with them", Reconciled(S.STABLE, 4, frozenset({T1})), 5, {T1, T2},
     None, nobody, Reconciled(S.STABLE, 5, frozenset({T1, T2}))),
    (1, "behind, untouched: takes the new epoch, same tasks", Reconciled(S.STABLE, 4, frozenset({T1})), 5, {T1},
     None, nobody, Reconciled(S.STABLE, 5, frozenset({T1}))),
    (1, "behind, loses one it may run: unrevoked, epoch kept, gains wait",
     Reconciled(S.STABLE, 4, frozenset({T1, T2})), 5, {T1, T3}, None, nobody,
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1}), frozenset({T2}))),
    (1, "behind, loses one its heartbeat says it stopped: no revocation step",
     Reconciled(S.STABLE, 4, frozenset({T1, T2})), 5, {T1, T3}, {T1}, nobody,
     Reconciled(S.STABLE, 5, frozenset({T1, T3}))),
    (1, "behind, gains one another member holds: unreleased at the target",
     Reconciled(S.STABLE, 4, frozenset({T1})), 5, {T1, T2, T3}, None, held(T3),
     Reconciled(S.UNRELEASED_TASKS, 5, frozenset({T1, T2}))),
    (2, "unrevoked, still lists a revoked task: unchanged",
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1}), frozenset({T2})), 5, {T1, T3}, {T1, T2}, nobody,
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1}), frozenset({T2}))),
    (2, "unrevoked, says nothing of what it runs: unchanged",
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1}), frozenset({T2})), 5, {T1, T3}, None, nobody,
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1}), frozenset({T2}))),
    (3, "unrevoked, released: stable at the target with the gains",
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1}), frozenset({T2})), 5, {T1, T3}, {T1}, nobody,
     Reconciled(S.STABLE, 5, frozenset({T1, T3}))),
    (3, "unrevoked, released, but the target moved again and takes more: epoch + 1, revoking anew",
     Reconciled(S.UNREVOKED_TASKS, 4, frozenset({T1, T3}), frozenset({T2})), 7, {T3}, {T1, T3}, nobody,
     Reconciled(S.UNREVOKED_TASKS, 5, frozenset({T3}), frozenset({T1}))),
    (4, "unreleased, the task is now free: stable",
     Reconciled(S.UNRELEASED_TASKS, 5, frozenset({T1})), 5, {T1, T4}, {T1}, nobody,
     Reconciled(S.STABLE, 5, frozenset({T1, T4}))),
    (4, "unreleased, still held elsewhere: unchanged",
     Reconciled(S.UNRELEASED_TASKS, 5, frozenset({T1})), 5, {T1, T4}, {T1}, held(T4),
     Reconciled(S.UNRELEASED_TASKS, 5, frozenset({T1}))),
]


@pytest.mark.parametrize(("row", "name", "current", "target_epoch", "target", "owned", "elsewhere", "expected"),
                         CASES, ids=[c[1] for c in CASES])
def test_reconcile_row(row: int, name: str, current: Reconciled, target_epoch: int, target: set[TaskReplica],
                       owned: set[TaskReplica] | None, elsewhere: object, expected: Reconciled) -> None:
    assert TABLE[row][0] is current.state
    got = reconcile(current, target_epoch, frozenset(target), None if owned is None else frozenset(owned),
                    elsewhere)  # type: ignore[arg-type]
    assert got == expected
    assert not (got.assigned & got.revoking)
    gained = got.assigned - current.assigned - current.revoking
    assert not any(elsewhere(t) for t in gained), "a task given while another member holds it"  # type: ignore[operator]


def test_every_row_of_the_table_has_a_case() -> None:
    assert {c[0] for c in CASES} == set(range(len(TABLE)))
