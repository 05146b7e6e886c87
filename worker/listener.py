"""What the embedding service implements to be told about its tasks (the listener contract)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from groupcoord.assignors.base import TaskReplica

__all__ = ["JoinListener", "LostListener", "TaskListener"]


class TaskListener(Protocol):
    """Required: called on the client's thread (``WorkerClient``) or awaited on the service's loop
    (``AsyncWorkerClient``, where the methods may be coroutines); an exception is logged, never fatal.

    Eager protocol: ``on_revoked`` comes before every re-join with every task (stop them all);
    ``on_assigned`` comes with each new generation's tasks. Cooperative protocol (KIP-429):
    ``on_revoked`` only with the tasks that move away, ``on_assigned`` only with the new ones;
    the tasks the worker keeps run through the rebalance.
    """

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None: ...

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None: ...


@runtime_checkable
class JoinListener(Protocol):
    """Optional: a listener that also has ``on_joined`` hears of every JoinGroup answered."""

    def on_joined(self, member_id: str, generation: int, is_leader: bool) -> None: ...


@runtime_checkable
class LostListener(Protocol):
    """Optional: tasks lost without a clean revoke (the session expired, the member was fenced or
    forgotten): another member may already run them. Without it, ``on_revoked`` is called."""

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None: ...
