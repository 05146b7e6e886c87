"""Which task a split's child came from, while some member may still run that parent.

Pulsar unloads a bundle before its split children are owned anywhere: for a moment nobody serves
the range, never two brokers. A consumer-protocol group does the same with its reconciliation rule:
replica ``r`` of a child counts as held by whoever holds replica ``r`` of its parent (or of the
parent's parent, for a child split again meanwhile), so no member is given a child until the parent's
owner has said, in a heartbeat, that it stopped the parent (or its session ended). Replicas of one
task are meant to run at once on different members, so only the same replica of the parent blocks.

The lineage (child id -> parent id) is kept per group while a parent is held, and only then: a split
records its children and forgets every parent nobody holds any more (O(what is held), at split time
only, which is rare: a full pass of the assignor ran just before). The functions are pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from groupcoord.assignors.base import TaskReplica
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["children_of", "held_ancestor", "parent_holder", "recorded"]


def parent_holder(split_from: Mapping[str, str], holder: Mapping[TaskReplica, str], task: TaskReplica) -> str | None:
    """The member holding the same replica of ``task``'s parent (or an older ancestor), or None."""
    held = held_ancestor(split_from, holder, task)
    return None if held is None else held[1]


def held_ancestor(split_from: Mapping[str, str], holder: Mapping[TaskReplica, str],
                  task: TaskReplica) -> tuple[TaskReplica, str] | None:
    """The nearest ancestor of ``task`` (same replica) that a member holds, and that member; or None."""
    task_id, steps = task.task_id, len(split_from)  # bounded: an id reused as a parent cannot loop us
    while steps > 0 and task_id in split_from:
        task_id, steps = split_from[task_id], steps - 1
        ancestor = TaskReplica(task_id, task.replica)
        owner = holder.get(ancestor)
        if owner is not None:
            return ancestor, owner
    return None


def children_of(split_from: Mapping[str, str], parent_id: str) -> list[str]:
    """The children (and their children) of ``parent_id`` that are still recorded."""
    found: list[str] = []
    frontier = [parent_id]
    while frontier and len(found) <= len(split_from):
        parent = frontier.pop()
        direct = [child for child, of in split_from.items() if of == parent]
        found += direct
        frontier += direct
    return found


def recorded(split_from: Mapping[str, str], splits: Iterable[pb.TaskSplit],
             holder: Mapping[TaskReplica, str]) -> dict[str, str]:
    """The lineage after ``splits``: their children, and what was recorded before whose parent (or an
    ancestor of it) some member still holds; everything else is forgotten."""
    held = {task.task_id for task in holder}
    lineage = {child.task_id: split.parent_task_id for split in splits for child in split.children}
    for child, parent in split_from.items():
        if child not in lineage:
            lineage[child] = parent
    live: dict[str, str] = {}
    for child, parent in lineage.items():
        task_id, steps = child, len(lineage)
        while steps > 0 and task_id in lineage:
            task_id, steps = lineage[task_id], steps - 1
            if task_id in held:
                live[child] = parent
                break
    return live
