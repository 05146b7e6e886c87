"""The worker's transitions table: each trigger's legal sources and destination, nothing else."""

from __future__ import annotations

import typing

import pytest
from transitions import MachineError

from groupcoord.worker.states import TRANSITIONS, Trigger, WorkerMachine, WorkerState

S = WorkerState
RUNNING = {S.PREPARING_JOIN, S.JOINING, S.SYNCING, S.STABLE}

# trigger -> (the states it may fire from, where it goes): the diagram of worker/states.py, written out again
EXPECTED: dict[str, tuple[set[WorkerState], WorkerState]] = {
    "start": ({S.DOWN}, S.PREPARING_JOIN),
    "join": ({S.PREPARING_JOIN}, S.JOINING),
    "joined": ({S.JOINING}, S.SYNCING),
    "synced": ({S.SYNCING}, S.STABLE),
    "fail": ({S.JOINING, S.SYNCING}, S.PREPARING_JOIN),
    "rejoin": ({S.STABLE}, S.PREPARING_JOIN),
    "stop": (RUNNING, S.DOWN),
}

# how a fresh machine reaches each state, through triggers only
PATH: dict[WorkerState, list[Trigger]] = {
    S.DOWN: [],
    S.PREPARING_JOIN: ["start"],
    S.JOINING: ["start", "join"],
    S.SYNCING: ["start", "join", "joined"],
    S.STABLE: ["start", "join", "joined", "synced"],
}


def machine_in(state: WorkerState) -> WorkerMachine:
    machine = WorkerMachine()
    for trigger in PATH[state]:
        machine.fire(trigger)
    assert machine.state is state
    return machine


def test_the_table_has_exactly_the_triggers_of_the_type() -> None:
    assert {row[0] for row in TRANSITIONS} == set(typing.get_args(Trigger)) == set(EXPECTED)
    assert len(TRANSITIONS) == len(EXPECTED)  # one row per trigger


@pytest.mark.parametrize("trigger", sorted(EXPECTED))
@pytest.mark.parametrize("state", list(WorkerState), ids=lambda s: s.value)
def test_each_trigger_fires_from_its_sources_only(trigger: Trigger, state: WorkerState) -> None:
    sources, dest = EXPECTED[trigger]
    machine = machine_in(state)
    if state in sources:
        assert machine.fire(trigger) is dest
        assert machine.state is dest
    else:
        with pytest.raises(MachineError):
            machine.fire(trigger)
        assert machine.state is state  # an illegal trigger changes nothing


def test_no_automatic_to_state_triggers() -> None:
    machine = WorkerMachine()
    assert not hasattr(machine, "to_STABLE")  # auto_transitions=False: no way around the table
    with pytest.raises(KeyError):
        machine.fire("to_STABLE")  # type: ignore[arg-type]


def test_every_transition_is_told_to_on_change() -> None:
    """The machine has no lock of its own (the core is sans-I/O): its driver wakes waiters from ``on_change``."""
    seen: list[tuple[WorkerState, WorkerState]] = []
    machine = WorkerMachine(on_change=lambda before, after: seen.append((before, after)))
    for trigger in [*PATH[S.STABLE], "rejoin", "stop"]:
        machine.fire(trigger)  # type: ignore[arg-type]
    assert seen == [(S.DOWN, S.PREPARING_JOIN), (S.PREPARING_JOIN, S.JOINING), (S.JOINING, S.SYNCING),
                    (S.SYNCING, S.STABLE), (S.STABLE, S.PREPARING_JOIN), (S.PREPARING_JOIN, S.DOWN)]


def test_the_states_keep_their_wire_names() -> None:
    assert [s.value for s in WorkerState] == ["Down", "PreparingJoin", "Joining", "Syncing", "Stable"]
