"""The leader's assignment, checked against a copy of what it depends on: on a thread if need be.

A SyncGroup from the leader can carry every replica of a 100,000-task catalog; checking it takes
a good part of a second. The service copies the inputs on the event loop (``inputs_of``: the
generation, catalog version, members' pools, catalog, owners), checks on a checker thread
(``check_assignment``), and the model accepts the verdict only if the group is still as copied
(``AssignmentCheck.fits``); otherwise it checks again, on the loop. Small groups are checked on
the loop directly: the same function, the same answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import limits
from groupcoord.coordinator.model.effects import OK
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.slices import SLICE, extend_in_slices
from groupcoord.coordinator.model.validation import AssignmentRejected, apply_splits, validate_assignment
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["AssignmentInputs", "AssignmentCheck", "inputs_of", "check_assignment", "split_bounds"]


@dataclass(frozen=True, slots=True)
class AssignmentInputs:
    """What a leader's assignment is checked against, copied from the group (the loop may change it)."""

    generation: int
    catalog_version: int
    protocol: str
    pools: dict[str, str]  # member id -> pool, for every member of the generation
    tasks: dict[str, pb.Task]
    owners: dict[tuple[str, int], frozenset[str]] | None  # cooperative generations only


@dataclass(frozen=True, slots=True)
class AssignmentCheck:
    """The verdict: ``rejected`` says why not; otherwise the catalog after the splits, the replicas
    being revoked (cooperative), each member's replicas and its SyncGroup answer, built here too
    (copying 100,000 replicas into messages is itself a tenth of a second)."""

    generation: int
    catalog_version: int
    pools: dict[str, str]
    rejected: str = ""
    tasks: dict[str, pb.Task] = field(default_factory=dict)
    revoking: set[tuple[str, int]] = field(default_factory=set)
    assignment: dict[str, list[pb.TaskReplica]] = field(default_factory=dict)
    responses: dict[str, pb.SyncGroupResponse] = field(default_factory=dict)

    def fits(self, group: Group) -> bool:
        """Whether the group is still as it was copied (same generation, catalog and members)."""
        return (self.generation == group.generation and self.catalog_version == group.catalog_version
                and len(self.pools) == len(group.members)
                and all(self.pools.get(mid) == mb.metadata.pool for mid, mb in group.members.items()))


def inputs_of(group: Group, cooperative: bool) -> AssignmentInputs:
    return AssignmentInputs(
        generation=group.generation,
        catalog_version=group.catalog_version,
        protocol=group.protocol,
        pools={mb.member_id: mb.metadata.pool for mb in group.members.values()},
        tasks=group.catalog_snapshot().tasks,  # read only; one copy per catalog version
        owners=dict(group.owners) if cooperative else None,
    )


def check_assignment(config: CoordinatorConfig, inputs: AssignmentInputs,
                     request: pb.SyncGroupRequest) -> AssignmentCheck:
    """Every rule of ``coordinator.model.validation`` plus the request's bounds; never raises."""
    def verdict(rejected: str) -> AssignmentCheck:
        return AssignmentCheck(inputs.generation, inputs.catalog_version, inputs.pools, rejected)

    if request.assignor_error:
        return verdict(f"the leader's assignor failed: {limits.escaped(request.assignor_error[:config.max_reason_length])}")
    out_of_bounds = _bounds(config, len(inputs.tasks), request)
    if out_of_bounds:
        return verdict(out_of_bounds)
    # each member's replicas read from the request once, for the check and for what the group keeps
    held = [_listed(a.tasks) for a in request.assignments]
    try:
        tasks = apply_splits(inputs.tasks, request.splits)
        revoking = validate_assignment(inputs.pools, tasks, request.assignments, request.unassigned, inputs.owners,
                                       held=held)
    except AssignmentRejected as rejected:
        return verdict(str(rejected))
    assignment: dict[str, list[pb.TaskReplica]] = {}
    responses: dict[str, pb.SyncGroupResponse] = {}
    for a, replicas in zip(request.assignments, held, strict=True):
        assignment[a.member_id] = replicas
        response = responses[a.member_id] = pb.SyncGroupResponse(
            error=OK, generation=inputs.generation, protocol=inputs.protocol, user_data=a.user_data,
            rejoin=bool(revoking))
        extend_in_slices(response.tasks, replicas)
    return AssignmentCheck(inputs.generation, inputs.catalog_version, inputs.pools, "", tasks, revoking,
                           assignment, responses)


def _listed(replicas: Sequence[pb.TaskReplica]) -> list[pb.TaskReplica]:
    """A repeated field as a list, a slice at a time (``coordinator.model.slices``: the loop may wait)."""
    if len(replicas) <= SLICE:
        return list(replicas)
    return [r for start in range(0, len(replicas), SLICE) for r in replicas[start:start + SLICE]]


def _bounds(config: CoordinatorConfig, catalog_size: int, request: pb.SyncGroupRequest) -> str:
    """Why the leader's request is out of bounds ("" if it is not): splits go through the same checks
    as PutTasks, so a split cannot bring in what the catalog would refuse."""
    too_many = split_bounds(config, catalog_size, request.splits)
    if too_many:
        return too_many
    failure = (limits.check_text(config, "assignor_error", request.assignor_error)
               or next(filter(None, (limits.check_text(config, "unassigned reason", u.reason, printable=True)
                                     for u in request.unassigned)), None))
    return failure.message if failure is not None else ""


def split_bounds(config: CoordinatorConfig, catalog_size: int, splits: Sequence[pb.TaskSplit]) -> str:
    """Why splits are out of bounds ("" if they are not), wherever they come from (a leader's SyncGroup,
    a consumer-protocol target): their count, the catalog's size after them, each child as PutTasks checks it."""
    if len(splits) > config.max_splits_per_sync:
        return f"{len(splits)} splits; at most {config.max_splits_per_sync} (max_splits_per_sync)"
    added = sum(len(split.children) - 1 for split in splits)
    if catalog_size + added > config.group_max_tasks:
        return f"the splits would make {catalog_size + added} tasks; at most {config.group_max_tasks} (group_max_tasks)"
    failure = limits.check_tasks(config, (c for split in splits for c in split.children), "split child")
    return failure.message if failure is not None else ""
