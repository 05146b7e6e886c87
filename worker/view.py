"""What a service reads of its worker client, the same for both clients (``WorkerClient``,
``AsyncWorkerClient``): its state, membership and tasks, read from the parts each client keeps."""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.worker.ownership import Ownership
from groupcoord.worker.session import Membership
from groupcoord.worker.states import WorkerMachine, WorkerState

__all__ = ["MemberView"]


class MemberView:
    """Read-only properties over ``_machine``, ``_session`` and ``_tasks``."""

    _machine: WorkerMachine
    _session: Membership
    _tasks: Ownership

    @property
    def state(self) -> WorkerState:
        return self._machine.state

    @property
    def member_id(self) -> str:
        return self._session.member_id

    @property
    def generation(self) -> int:
        return self._session.generation

    @property
    def leader_id(self) -> str:
        return self._session.leader_id

    @property
    def is_leader(self) -> bool:
        return self._session.is_leader

    @property
    def protocol(self) -> str:
        return self._session.protocol

    @property
    def assigned_tasks(self) -> tuple[TaskReplica, ...]:
        return self._tasks.assigned

    @property
    def rebalance_protocol(self) -> str:
        """"eager" or "cooperative": how the current generation rebalances."""
        return self._session.rebalance_protocol
