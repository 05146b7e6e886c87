"""What a service reads of its worker client, the same for both clients (``WorkerClient``,
``AsyncWorkerClient``): its state, membership and tasks, read from the parts each client keeps."""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.worker.member import Member
from groupcoord.worker.states import WorkerState

__all__ = ["MemberView"]


class MemberView:
    """Read-only properties over the member core (``_member``) the client drives."""

    _member: Member

    @property
    def state(self) -> WorkerState:
        return self._member.machine.state

    @property
    def member_id(self) -> str:
        return self._member.session.member_id

    @property
    def generation(self) -> int:
        return self._member.session.generation

    @property
    def leader_id(self) -> str:
        return self._member.session.leader_id

    @property
    def is_leader(self) -> bool:
        return self._member.session.is_leader

    @property
    def protocol(self) -> str:
        return self._member.session.protocol

    @property
    def assigned_tasks(self) -> tuple[TaskReplica, ...]:
        return self._member.tasks.assigned

    @property
    def rebalance_protocol(self) -> str:
        """"eager" or "cooperative": how the current generation rebalances."""
        return self._member.session.rebalance_protocol
