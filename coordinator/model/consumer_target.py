"""The server-side assignor of the consumer protocol: a group's target computed from a frozen copy.

The model takes ``TargetInputs`` on the event loop (references to frozen member views, the
catalog snapshot of one version, the latest load snapshot) and the runtime runs
``compute_target`` on a checker thread: the assignor (any ``Assignor`` by name: the built-ins,
``register``-ed ones, entry points) never holds the loop. ``check_target`` turns its answer into
the target the model installs, or says why it cannot be used.
"""

from __future__ import annotations

from dataclasses import dataclass

from groupcoord.assignors.base import (
    Assignment,
    AssignmentContext,
    AssignorError,
    MemberInfo,
    TaskReplica,
    TaskSpec,
)
from groupcoord.assignors.registry import UnknownAssignorError, get_assignor
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import snapshot_from_pb, task_spec

__all__ = ["TargetInputs", "compute_target", "check_target", "assignor_exists"]


@dataclass(frozen=True, slots=True)
class TargetInputs:
    """What one computation reads: nothing here changes after it is taken."""

    group_id: str
    epoch: int
    assignor: str
    members: tuple[MemberInfo, ...]
    catalog: CatalogSnapshot | None
    load_snapshot: pb.LoadSnapshot | None


def assignor_exists(name: str) -> bool:
    """Whether ``name`` resolves to an assignor in this process (imports it on first use); a leader-side
    one, ``client:<name>``, runs on a member (``leader_assignor``): any name."""
    if name.startswith("client:"):
        return len(name) > len("client:")
    try:
        get_assignor(name)
    except UnknownAssignorError:
        return False
    return True


def compute_target(inputs: TargetInputs) -> Assignment | str:
    """Run the group's assignor; its answer, or why there is none (a string, for the group's last error)."""
    tasks: tuple[TaskSpec, ...] = ()
    if inputs.catalog is not None:
        tasks = tuple(task_spec(task) for task in inputs.catalog.in_order())
    snapshot = snapshot_from_pb(inputs.load_snapshot) if inputs.load_snapshot is not None else None
    context = AssignmentContext(group_id=inputs.group_id, generation=inputs.epoch, members=inputs.members,
                                tasks=tasks, load_snapshot=snapshot)
    try:
        return get_assignor(inputs.assignor).assign(context)
    except (AssignorError, UnknownAssignorError) as failure:
        return f"assignor {inputs.assignor!r}: {failure}"


def check_target(answer: Assignment | str, members: set[str],
                 catalog: CatalogSnapshot | None) -> dict[str, frozenset[TaskReplica]] | str:
    """The target per member, or why the answer cannot be one: a replica given twice, or not in the
    catalog. Members gone meanwhile are dropped (their tasks wait for the next computation)."""
    if isinstance(answer, str):
        return answer
    seen: set[TaskReplica] = set()
    target: dict[str, frozenset[TaskReplica]] = {}
    known = catalog.tasks if catalog is not None else {}
    for member_id, tasks in answer.members.items():
        given = frozenset(tasks)
        if len(given) != len(tasks) or not seen.isdisjoint(given):
            return f"the assignor gave a task replica twice (member {member_id!r})"
        seen |= given
        for task in given:
            spec = known.get(task.task_id)
            if spec is None or not 0 <= task.replica < max(spec.replicas, 1):
                return f"the assignor gave {task}, which is not in the catalog"
        if member_id in members:
            target[member_id] = given
    return target
