"""A small fleet of consumer-protocol members driven against the model (a ``Harness``), each member
behaving as a client must: it runs exactly the last assignment it received, reports what it runs,
stops everything when fenced or unknown, and stops by itself when it has heard nothing for its
session timeout. ``running()`` is what the members really run, to check against each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.testing import Harness, Pending
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"
SESSION_MS = 6_000


@dataclass
class SimMember:
    name: str
    instance_id: str = ""
    member_id: str = ""
    epoch: int = 0
    running: set[TaskReplica] = field(default_factory=set)
    heard_at: float = 0.0  # when it last got an answer
    joined: bool = False

    def stop(self) -> None:
        self.member_id, self.epoch, self.joined = "", 0, False
        self.running = set()


def heartbeat(h: Harness, request: pb.GroupHeartbeatRequest) -> Pending:
    return h.run(lambda token: h.model.group_heartbeat(request, token, "test"), pb.GroupHeartbeatResponse)


def tasks_of(response: pb.GroupHeartbeatResponse) -> set[TaskReplica]:
    return {TaskReplica(t.task_id, t.replica) for t in response.assignment.tasks}


class Fleet:
    def __init__(self, h: Harness, names: list[str], *, static: bool = False) -> None:
        self.h = h
        self.members = {n: SimMember(n, instance_id=f"i-{n}" if static else "") for n in names}

    def join(self, name: str, **fields: object) -> pb.GroupHeartbeatResponse:
        m = self.members[name]
        request = pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, session_timeout_ms=SESSION_MS,
                                           rebalance_timeout_ms=SESSION_MS, client_id=name, **fields)  # type: ignore[arg-type]
        if m.instance_id:
            request.instance_id = m.instance_id
        return self._apply(m, heartbeat(self.h, request).response)

    def beat(self, name: str, *, lose_answer: bool = False, report: bool = True) -> pb.GroupHeartbeatResponse:
        m = self.members[name]
        request = pb.GroupHeartbeatRequest(group_id=G, member_id=m.member_id, member_epoch=m.epoch)
        if report:
            request.owned.SetInParent()
            request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica) for t in m.running)
        response = heartbeat(self.h, request).response
        if lose_answer:
            return response
        return self._apply(m, response)

    def leave(self, name: str, epoch: int = -1) -> pb.GroupHeartbeatResponse:
        m = self.members[name]
        request = pb.GroupHeartbeatRequest(group_id=G, member_id=m.member_id, member_epoch=epoch)
        if m.instance_id:
            request.instance_id = m.instance_id
        response = heartbeat(self.h, request).response
        m.stop()
        return response

    def _apply(self, m: SimMember, response: pb.GroupHeartbeatResponse) -> pb.GroupHeartbeatResponse:
        if response.error.code in (pb.FENCED_MEMBER_EPOCH, pb.UNKNOWN_MEMBER_ID):
            m.stop()
        elif response.error.code == pb.NONE:
            m.member_id, m.epoch, m.joined = response.member_id, response.member_epoch, True
            m.heard_at = self.h.clock.now()
            if response.HasField("assignment"):
                m.running = tasks_of(response)
        return response

    def expire_silent(self) -> None:
        """Members that heard nothing for their session timeout stop by themselves (the client's rule)."""
        now = self.h.clock.now()
        for m in self.members.values():
            if m.joined and now >= m.heard_at + SESSION_MS / 1000:
                m.stop()

    def running(self) -> dict[str, set[TaskReplica]]:
        return {n: set(m.running) for n, m in self.members.items() if m.running}

    def assert_no_task_run_twice(self) -> None:
        seen: dict[TaskReplica, str] = {}
        for name, tasks in self.running().items():
            for task in tasks:
                assert task not in seen, f"{task} run by {seen[task]} and {name} at once"
                seen[task] = name

    def settle(self, rounds: int = 6) -> None:
        """Every joined member heartbeats, a few rounds, with time for the target to be computed."""
        for _ in range(rounds):
            self.h.advance(0.2)
            self.expire_silent()  # time passed: a member that heard nothing for its session stops first
            for name, m in self.members.items():
                if m.joined:
                    self.beat(name)
                    self.assert_no_task_run_twice()
