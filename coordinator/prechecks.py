"""Checks that need only a request and the config: run on a thread, before the model step.

The service hands the heavy ones (a PutTasks of up to ``max_tasks_per_request`` tasks, a load
report of up to ``max_tasks_per_report`` entries) to a thread, so the event loop keeps answering
other groups' heartbeats meanwhile. The model then takes ``checked=True`` and skips them; called
without it (tests, tools), it runs the same functions itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator import limits
from coordinator.config import CoordinatorConfig
from coordinator.effects import error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Verdict", "catalog_error", "report_error"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A precheck's outcome, handed to the model step: ``failure`` None means it passed."""

    failure: pb.Error | None


def catalog_error(config: CoordinatorConfig, tasks: Sequence[pb.Task]) -> pb.Error | None:
    """What is wrong with the tasks of one PutTasks (size, each entry, duplicates), or None."""
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
