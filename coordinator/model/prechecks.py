"""Checks that need only a request and the config: run on a thread, before the model step.

The service hands the heavy ones (a PutTasks of up to ``max_tasks_per_request`` tasks, a load
report of up to ``max_tasks_per_report`` entries) to a thread, so the event loop keeps answering
other groups' heartbeats meanwhile. The model step then takes the verdict (``checked``) instead of
checking again; called without one (tests, tools), it runs the same functions itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import limits
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.effects import error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Verdict", "CatalogCheck", "check_catalog", "report_error", "snapshot_error"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A precheck's outcome, handed to the model step: ``failure`` None means it passed."""

    failure: pb.Error | None


@dataclass(frozen=True, slots=True)
class CatalogCheck:
    """A PutTasks' tasks checked (``failure``), as the catalog keeps them (0 replicas means 1), and
    compared with ``base`` (the group's catalog when the check began, if it had one): which of
    them change it, and how many are new."""

    failure: pb.Error | None
    tasks: list[pb.Task]
    base: CatalogSnapshot | None = None
    changed: list[pb.Task] = field(default_factory=list)
    new: int = 0


def check_catalog(config: CoordinatorConfig, tasks: Sequence[pb.Task],
                  base: CatalogSnapshot | None = None) -> CatalogCheck:
    """The tasks of one PutTasks: size, each entry, duplicates; then normalised and compared."""
    failure = _catalog_error(config, tasks)
    if failure is not None:
        return CatalogCheck(failure, [])
    kept = []
    for task in tasks:
        if not task.replicas:  # store it as 1 (the request is not ours to change: a copy)
            normalised = pb.Task()
            normalised.CopyFrom(task)
            normalised.replicas = 1
            task = normalised
        kept.append(task)
    if base is None:
        return CatalogCheck(None, kept)
    known = base.tasks
    changed = [task for task in kept if known.get(task.task_id) != task]
    return CatalogCheck(None, kept, base, changed, sum(1 for task in changed if task.task_id not in known))


def _catalog_error(config: CoordinatorConfig, tasks: Sequence[pb.Task]) -> pb.Error | None:
    if len(tasks) > config.max_tasks_per_request:
        return error(pb.INVALID_REQUEST, f"{len(tasks)} tasks; at most {config.max_tasks_per_request} "
                     f"(max_tasks_per_request)")
    failure = limits.check_tasks(config, tasks)
    if failure is not None:
        return failure
    seen: set[str] = set()
    for task in tasks:
        task_id = task.task_id
        if task_id in seen:
            return error(pb.DUPLICATE_TASK, f"task {task_id!r} given twice")
        seen.add(task_id)
    return None


def report_error(config: CoordinatorConfig, request: pb.ReportLoadRequest) -> pb.Error | None:
    if not request.HasField("report"):
        return error(pb.INVALID_REQUEST, "report is missing")
    return limits.check_report(config, request.report)


def snapshot_error(config: CoordinatorConfig, request: pb.PublishLoadSnapshotRequest, now_ms: int) -> pb.Error | None:
    """Size (measuring a 16 MB snapshot takes ~50 ms), id, and ``created_ms`` not in the future."""
    return limits.check_snapshot(config, request.snapshot, now_ms)
