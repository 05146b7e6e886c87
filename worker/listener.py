"""What the embedding service implements to be told about its tasks (the listener contract)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from assignors.base import TaskReplica

__all__ = ["JoinListener", "TaskListener"]


class TaskListener(Protocol):
    """Required: called on the client's thread; an exception is logged, never fatal.

    ``on_revoked`` comes before every re-join (eager protocol): stop those tasks.
    ``on_assigned`` comes with each new generation's tasks.
    """

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None: ...

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None: ...


@runtime_checkable
class JoinListener(Protocol):
    """Optional: a listener that also has ``on_joined`` hears of every JoinGroup answered."""

    def on_joined(self, member_id: str, generation: int, is_leader: bool) -> None: ...
