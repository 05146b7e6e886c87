"""The group state machine: its five states and every transition, in one place.

How each state answers each request (Kafka's ClassicGroupState, the seed's
Datalink diagram); ``tests/coordinator/model/test_group_states.py`` drives one test from this table.

==================  =============================  ===========================  ======================  ===============
state               JoinGroup (known member)       SyncGroup                    Heartbeat               LeaveGroup
==================  =============================  ===========================  ======================  ===============
Empty               new member: MEMBER_ID_REQUIRED UNKNOWN_MEMBER_ID            UNKNOWN_MEMBER_ID       UNKNOWN_MEMBER_ID
                    then PreparingRebalance
PreparingRebalance  held until the phase completes REBALANCE_IN_PROGRESS        REBALANCE_IN_PROGRESS   removed; phase
                                                                                                        may complete
AwaitingSync        same metadata: current gen;    follower held until the      REBALANCE_IN_PROGRESS   removed;
                    changed: PreparingRebalance    leader's; leader's validated (after member/gen       PreparingRebalance
                    (held syncs get REBALANCE_...) → Stable or INVALID_ASSIG.  checks)
Stable              follower, same metadata:       the stored assignment        NONE (session renewed)  removed;
                    current gen; leader or changed                                                      PreparingRebalance
                    metadata: PreparingRebalance
Dead                COORDINATOR_NOT_AVAILABLE      COORDINATOR_NOT_AVAILABLE    COORDINATOR_NOT_AVAIL.  COORDINATOR_NOT_AVAIL.
==================  =============================  ===========================  ======================  ===============

Where each column lives: ``coordinator.model.join.KNOWN_MEMBER_JOIN``, ``coordinator.model.sync.SYNC``,
``coordinator.model.membership.HEARTBEAT_ANSWER`` and ``handle_leave`` (one handler per state), with
the rebalance steps they share in ``coordinator.model.phases``.

Unknown member ids get UNKNOWN_MEMBER_ID and stale generations ILLEGAL_GENERATION
in every state but Dead. Valid previous states: Empty ← PreparingRebalance;
PreparingRebalance ← Empty, AwaitingSync, Stable; AwaitingSync ← PreparingRebalance;
Stable ← AwaitingSync; Dead ← any.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from transitions import Machine

__all__ = ["GroupState", "TRANSITIONS", "new_machine"]


class GroupState(Enum):
    EMPTY = "Empty"
    """No members: the initial state, and after the last member left or expired."""
    PREPARING_REBALANCE = "PreparingRebalance"
    """Collecting JoinGroups of the members; ends when all re-joined or at the rebalance timeout."""
    AWAITING_SYNC = "AwaitingSync"
    """A new generation has a leader; waiting for the leader's SyncGroup with the assignment."""
    STABLE = "Stable"
    """The assignment is accepted; heartbeats keep members alive."""
    DEAD = "Dead"
    """The group's metadata is being removed (deleted, or this coordinator lost it)."""


S = GroupState
# [trigger, source(s), destination]: the only ways a group changes state.
TRANSITIONS: list[list[Any]] = [
    ["prepare_rebalance", [S.EMPTY, S.AWAITING_SYNC, S.STABLE], S.PREPARING_REBALANCE],
    ["complete_join", S.PREPARING_REBALANCE, S.AWAITING_SYNC],
    ["become_empty", S.PREPARING_REBALANCE, S.EMPTY],
    ["complete_sync", S.AWAITING_SYNC, S.STABLE],
    ["mark_dead", [S.EMPTY, S.PREPARING_REBALANCE, S.AWAITING_SYNC, S.STABLE, S.DEAD], S.DEAD],
]


def new_machine() -> Machine:
    """One machine per coordinator; each group is added with ``machine.add_model(group)``."""
    return Machine(
        model=None,
        states=GroupState,
        transitions=TRANSITIONS,
        initial=GroupState.EMPTY,
        auto_transitions=False,
        send_event=False,
    )
