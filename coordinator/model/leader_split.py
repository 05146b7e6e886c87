"""A leader's split in its ``TargetAnswer`` (a ``client:<name>`` group, Pulsar's bundle split on the worker).

The leader's assignor may split tasks as the coordinator's own may (``consumer_split``): its answer
then carries ``splits``, and its ``assignments`` place the catalog after them. The coordinator checks
the split as it checks a coordinator-side one, with the same messages: the parent is in the catalog,
each split has children, no child id is empty or in use (``validation.apply_splits``), the catalog was
not edited since the leader was asked, the split is within a leader's bounds (``max_splits_per_sync``,
``group_max_tasks``, each child as PutTasks checks it: ``consumer_split.refusal``); and, as the answer
lists only what changed, that it covers the split: every replica of every child is given to a member
the answer lists, and no member keeps a replica of the parent. A split that fails any of these is
refused, the catalog unchanged, and the coordinator falls back to its own assignor (``leader_assignor``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model import consumer_split
from groupcoord.coordinator.model.consumer_group import ConsumerGroup
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.validation import AssignmentRejected, apply_splits, replicas_of
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["LeaderSplit", "check_splits", "check_covered"]


@dataclass(frozen=True, slots=True)
class LeaderSplit:
    """A leader's split that checks against the catalog: the catalog after it, the splits, and how many
    replicas each parent had."""

    tasks: dict[str, pb.Task]
    splits: tuple[pb.TaskSplit, ...]
    parent_replicas: dict[str, int]


def check_splits(m: Model, group: ConsumerGroup, answer: pb.TargetAnswer) -> LeaderSplit | str:
    """The answer's splits applied to the catalog the leader was asked with, or why they cannot be."""
    classic = m.groups.get(group.group_id)
    if classic is None:
        return "the leader's split: the group has no catalog"
    splits = tuple(answer.splits)
    refused_now = consumer_split.refusal(m, group, group.asked_catalog, splits)  # first: bounds the work below
    if refused_now:
        return f"the leader's {refused_now}"
    catalog = classic.catalog_snapshot().tasks
    try:
        tasks = apply_splits(catalog, splits)
    except AssignmentRejected as refused:
        return f"the leader's split: {refused}"
    return LeaderSplit(tasks, splits, {s.parent_task_id: replicas_of(catalog[s.parent_task_id]) for s in splits})


def check_covered(split: LeaderSplit, delta: Mapping[str, frozenset[TaskReplica]],
                  index: Mapping[TaskReplica, str], members: Mapping[str, object]) -> str:
    """Why the answer's changed targets do not carry the split through ("" if they do): a child replica
    given to nobody, or a parent replica its member of the target keeps (``index``: replica -> member)."""
    placed: set[TaskReplica] = set().union(*delta.values()) if delta else set()
    for s in split.splits:
        parent = s.parent_task_id
        for replica in range(split.parent_replicas[parent]):
            task = TaskReplica(parent, replica)
            owner = index.get(task)
            if owner is not None and owner in members and (owner not in delta or task in delta[owner]):
                return f"the leader's split of {parent!r}: {parent}#{replica} stays with {owner}"
        for child in s.children:
            for replica in range(replicas_of(child)):
                if TaskReplica(child.task_id, replica) not in placed:
                    return (f"the leader's split of {parent!r}: children not covering it, "
                            f"{child.task_id}#{replica} is given to no member")
    return ""
