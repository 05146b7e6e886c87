"""The worker's diagram: its five states and every transition, in one place.

The seed's worker diagram, with what moves the worker along each edge::

    Down --start--> PreparingJoin --join--> Joining --joined--> Syncing --synced--> Stable
                        ^   ^                  |                    |                  |
                        |   +------fail--------+--------------------+                  |
                        +-----------------------------rejoin---------------------------+
    any state but Down --stop--> Down

===============  ============================================================================
state            what the worker is doing
===============  ============================================================================
Down             not started, or stopped (closed, or a fatal RequestError: see fatal_error)
PreparingJoin    revoking its tasks (eager protocol), then waiting out the retry backoff
                 before the next JoinGroup; after a failed attempt the worker stays here
                 for the whole backoff
Joining          a JoinGroup is in flight (the coordinator holds it until the join phase ends)
Syncing          JoinGroup answered; the leader runs its assignor, every member's SyncGroup is
                 in flight
Stable           tasks assigned; heartbeats (and load reports) every heartbeat interval
===============  ============================================================================

Which error fires which trigger (``fail``, ``rejoin``, ``stop``), whether it resets the member id,
and whether it is retried at once, after the backoff or never, is the table of ``worker.rules``
(one row per error class), which both clients look every failure up in. Beside it:
``request_rebalance()`` and a leader's assignor that wants to move tasks on a new load snapshot
fire ``rejoin``; ``close()`` or a fatal error fires ``stop`` (tasks revoked, LeaveGroup sent
first); ``close()`` cancels the call in flight, so it does not wait for that call's deadline.

Deadlines: JoinGroup and SyncGroup get the rebalance timeout plus the request timeout (the
coordinator holds them until the phase ends); calls in Stable get half the session, never
past its end (so a hung coordinator is left while the session elsewhere is still alive).

``tests/worker/test_worker_states.py`` checks each trigger's legal sources against this table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal

from transitions import Machine

__all__ = ["TRANSITIONS", "Trigger", "WorkerMachine", "WorkerState"]

log = logging.getLogger("groupcoord.worker")


class WorkerState(Enum):
    DOWN = "Down"
    """Not started, or stopped."""
    PREPARING_JOIN = "PreparingJoin"
    """Revoking tasks, then backing off before the next JoinGroup."""
    JOINING = "Joining"
    """A JoinGroup is in flight."""
    SYNCING = "Syncing"
    """Assigning (leader) and waiting for SyncGroup's answer."""
    STABLE = "Stable"
    """Running the assigned tasks; heartbeating."""


Trigger = Literal["start", "join", "joined", "synced", "fail", "rejoin", "stop"]

S = WorkerState
_RUNNING = [S.PREPARING_JOIN, S.JOINING, S.SYNCING, S.STABLE]
# [trigger, source(s), destination]: the only ways a worker changes state.
TRANSITIONS: list[list[Any]] = [
    ["start", S.DOWN, S.PREPARING_JOIN],
    ["join", S.PREPARING_JOIN, S.JOINING],
    ["joined", S.JOINING, S.SYNCING],
    ["synced", S.SYNCING, S.STABLE],
    ["fail", [S.JOINING, S.SYNCING], S.PREPARING_JOIN],
    ["rejoin", S.STABLE, S.PREPARING_JOIN],
    ["stop", _RUNNING, S.DOWN],
]


class WorkerMachine:
    """One worker's position on the diagram: the only writer of its state.

    No lock and no waiting here (the member core is sans-I/O): ``on_change`` gets every change,
    and the driver wakes its waiters from it (the threaded client's Condition, the asyncio client's
    event). An illegal trigger raises ``transitions.MachineError``.
    """

    state: WorkerState  # written by the Machine only

    def __init__(self, name: str = "worker",
                 on_change: Callable[[WorkerState, WorkerState], None] | None = None) -> None:
        self.name = name
        self._on_change = on_change  # (before, after) of every change (metrics, the driver's waiters)
        self._machine = Machine(
            model=self,
            states=WorkerState,
            transitions=TRANSITIONS,
            initial=WorkerState.DOWN,
            auto_transitions=False,
            send_event=False,
            model_attribute="state",
        )

    def fire(self, trigger: Trigger) -> WorkerState:
        """Move along ``trigger``'s edge (MachineError if it has none from here); returns the new state."""
        before = self.state
        self._machine.events[trigger].trigger(self)
        if self.state is not before:
            log.debug("%s: %s -> %s (%s)", self.name, before.value, self.state.value, trigger)
            if self._on_change is not None:
                self._on_change(before, self.state)
        return self.state
