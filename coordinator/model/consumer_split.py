"""A consumer-protocol target whose assignor split tasks: the split applied to the catalog, or undone.

The classic protocol applies a leader's splits to the catalog with its assignment, in the one write
that makes the generation Stable (``sync``). A server-side assignor of the consumer protocol (Pulsar's
auto bundle split in a ``pulsar-*`` full pass) splits the same way: ``consumer_target.check_target``
checks its target against the catalog after the splits, off the loop, and ``accept`` applies that
catalog on the loop, fenced by the catalog version the computation read and within a leader's bounds
(``max_splits_per_sync``, ``group_max_tasks``, each child as PutTasks checks it). The caller writes
the group's record (catalog and target together) before any member hears of it.

A split that cannot be applied (the catalog was edited meanwhile, or the split is out of bounds) is
undone rather than refused: the target keeps each parent where its first child went, so the group
is never left on its previous target (that would place no member joining or leaving while the task
stays over the split limit). A leader's split (``client:<name>``, ``TargetAnswer.splits``) is checked by
``leader_split`` and applied by the same ``refusal``/``apply``; one that cannot be applied is refused
(the coordinator's own assignor computes the target instead).

Either way, each child waits for its parent's release (``split_lineage``): a child is given to no
member while another still holds the same replica of its parent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from groupcoord.coordinator.model.assignment_check import split_bounds
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.consumer_group import ConsumerGroup
from groupcoord.coordinator.model.consumer_target import SplitTarget, Target
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.split_lineage import recorded
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Accepted", "accept", "refusal", "apply"]

log = logging.getLogger("groupcoord.consumer")


@dataclass(frozen=True, slots=True)
class Accepted:
    """The target to install; ``catalog``: the catalog after the split (the next incremental round's
    basis), None when the split was undone, and then ``refused`` says why."""

    target: Target
    catalog: CatalogSnapshot | None
    refused: str = ""


def accept(m: Model, group: ConsumerGroup, result: SplitTarget) -> Accepted:
    """Apply the split to the group's catalog if it still is the version the computation read and the
    split is in bounds; else the target with the split undone."""
    refused = refusal(m, group, result.base, result.splits)
    if refused:
        log.warning("group %s: %s; the target keeps the parent", group.group_id, refused,
                    extra={"event": "split_refused", "group": group.group_id, "reason": refused})
        return Accepted(result.kept, None, refused)
    return Accepted(result.target, apply(m, group, result.tasks, result.splits))


def refusal(m: Model, group: ConsumerGroup, base: int | None, splits: Sequence[pb.TaskSplit]) -> str:
    """Why splits computed from catalog version ``base`` cannot be applied now ("" if they can): the
    catalog was edited since, or they are out of a leader's bounds."""
    classic = m.groups.get(group.group_id)
    if classic is None or classic.catalog_version != base:
        refused = "the catalog changed while the target was computed"
    else:
        refused = split_bounds(m.config, len(classic.tasks), splits)
    parents = ", ".join(split.parent_task_id for split in splits)
    return f"split of {parents} not applied: {refused}" if refused else ""


def apply(m: Model, group: ConsumerGroup, tasks: dict[str, pb.Task], splits: Sequence[pb.TaskSplit]) -> CatalogSnapshot:
    """Replace the catalog by ``tasks`` (the catalog after ``splits``; ``refusal`` said yes), note each
    child's parent so it waits for the parent's release (``split_lineage``); the new catalog's snapshot."""
    classic = m.groups[group.group_id]
    classic.tasks = dict(tasks)
    classic.catalog_version += 1
    group.catalog_version = classic.catalog_version  # the target counts this catalog: no new epoch for it
    group.split_from = recorded(group.split_from, splits, group.holder)
    parents = ", ".join(split.parent_task_id for split in splits)
    children = sum(len(split.children) for split in splits)
    log.info("group %s: split %s into %d task(s) (catalog version %d)", group.group_id, parents, children,
             classic.catalog_version, extra={"event": "tasks_split", "group": group.group_id, "parents": parents,
                                             "children": children, "lineage": {  # child -> parent: log readers
                                                 c.task_id: split.parent_task_id for split in splits
                                                 for c in split.children}})
    return classic.catalog_snapshot()
