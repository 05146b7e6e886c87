"""A consumer-protocol member over the raw stub, for tests that play a ``client:<name>`` group's members (and
its leader) by hand: it joins, heartbeats what it runs, and takes what each answer says."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

__all__ = ["RawMember", "replica_name"]


def replica_name(task: pb.TaskReplica) -> str:
    """Replica 0 as its bare task id, the others ``id#replica`` (as ``groups describe`` names them)."""
    return task.task_id if task.replica == 0 else f"{task.task_id}#{task.replica}"


def _replica(name: str) -> pb.TaskReplica:
    task_id, sep, replica = name.rpartition("#")
    return pb.TaskReplica(task_id=task_id, replica=int(replica)) if sep and replica.isdigit() else pb.TaskReplica(
        task_id=name)


@dataclass
class RawMember:
    """``running``: the replicas its last assignment gave it, by name; ``holding``: replicas it goes on running
    (and listing) whatever it is told; ``asked``: the leader's last request for a target."""

    stub: pb_grpc.GroupCoordinatorStub
    name: str
    group_id: str = "g"
    assignor: str = "client:round-robin"
    session_timeout_ms: int = 6_000
    rebalance_timeout_ms: int | None = None  # None: not sent (the coordinator's default)
    member_id: str = ""
    epoch: int = 0
    running: set[str] = field(default_factory=set)
    holding: set[str] = field(default_factory=set)
    asked: pb.TargetRequest | None = None

    def send(self, request: pb.GroupHeartbeatRequest) -> pb.GroupHeartbeatResponse:
        answer: pb.GroupHeartbeatResponse = self.stub.GroupHeartbeat(request, timeout=10)
        assert answer.error.code == pb.NONE, answer.error
        self.member_id, self.epoch = answer.member_id, answer.member_epoch
        if answer.HasField("assignment"):
            self.running = {replica_name(t) for t in answer.assignment.tasks}
        if answer.HasField("compute_target"):
            self.asked = answer.compute_target
        return answer

    def join(self) -> None:
        request = pb.GroupHeartbeatRequest(group_id=self.group_id, member_epoch=0, client_id=self.name,
                                           assignor=self.assignor, session_timeout_ms=self.session_timeout_ms)
        if self.rebalance_timeout_ms is not None:  # a field with presence: 0 sent is 0 refused
            request.rebalance_timeout_ms = self.rebalance_timeout_ms
        self.send(request)

    def beat(self, target: pb.TargetAnswer | None = None) -> None:
        request = pb.GroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch)
        request.owned.SetInParent()
        request.owned.tasks.extend(_replica(t) for t in sorted(self.running | self.holding))
        if target is not None:
            request.target.CopyFrom(target)
        self.send(request)
