"""Checks that need only a request and the config: run on a thread, before the model step.

The service hands the heavy ones (a PutTasks of up to ``max_tasks_per_request`` tasks, a load
report of up to ``max_tasks_per_report`` entries) to a thread, so the event loop keeps answering
other groups' heartbeats meanwhile. The model step then takes the verdict (``checked``) instead of
checking again; called without one (tests, tools), it runs the same functions itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator import limits
from coordinator.config import CoordinatorConfig
from coordinator.effects import error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Verdict", "CatalogCheck", "check_catalog", "report_error"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A precheck's outcome, handed to the model step: ``failure`` None means it passed."""

    failure: pb.Error | None


@dataclass(frozen=True, slots=True)
class CatalogCheck:
    """A PutTasks' tasks checked (``failure``), and as the catalog keeps them (0 replicas means 1)."""

    failure: pb.Error | None
    tasks: list[pb.Task]


def check_catalog(config: CoordinatorConfig, tasks: Sequence[pb.Task]) -> CatalogCheck:
    """The tasks of one PutTasks: size, each entry, duplicates; then normalised."""
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
    return CatalogCheck(None, kept)


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
