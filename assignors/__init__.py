"""Assignors: decide which member runs which task replica (see ``assignors.base``)."""

from groupcoord.assignors.base import (
    Assignment,
    AssignmentContext,
    Assignor,
    AssignorError,
    MemberInfo,
    RebalanceCheck,
    TaskReplica,
    TaskSpec,
    TaskSplit,
    eligible_members,
)
from groupcoord.assignors.cooperative import COOPERATIVE, EAGER, cooperative_step
from groupcoord.assignors.incremental import IncrementalAssignor, TargetChange
from groupcoord.assignors.registry import UnknownAssignorError, available_assignors, get_assignor, register
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats

__all__ = [
    # contract
    "Assignor",
    "AssignmentContext",
    "Assignment",
    "AssignorError",
    "RebalanceCheck",
    "MemberInfo",
    "TaskSpec",
    "TaskReplica",
    "TaskSplit",
    "eligible_members",
    # incremental targets (the consumer protocol's coordinator)
    "IncrementalAssignor",
    "TargetChange",
    # cooperative rebalancing (KIP-429)
    "EAGER",
    "COOPERATIVE",
    "cooperative_step",
    # lookup
    "get_assignor",
    "register",
    "available_assignors",
    "UnknownAssignorError",
    # load snapshot
    "LoadSnapshot",
    "TaskLoadStats",
    "WorkerLoadStats",
]
