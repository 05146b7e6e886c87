"""Classic-protocol members driven against the model (a ``Harness``), each behaving as the stock
worker does: JoinGroup (with the MEMBER_ID_REQUIRED step), SyncGroup, heartbeats; an eager member
stops everything before it joins, a cooperative one runs on and reports what it runs, stops what an
assignment drops and re-joins at once; REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION make it re-join,
UNKNOWN_MEMBER_ID stop everything and join afresh; a session with no answer stops its tasks and
re-joins under the same member id. A leader assigns by keeping what each member owns
and dealing out the rest. ``running`` is what each really runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.testing import Harness, Pending
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import SESSION_MS, G

COOPERATIVE = "cooperative"


@dataclass
class ClassicMember:
    name: str
    cooperative: bool
    member_id: str = ""
    generation: int = -1
    running: set[TaskReplica] = field(default_factory=set)
    pending: tuple[str, Pending] | None = None
    in_group: bool = False  # it has a generation to heartbeat with
    rejoin: bool = False
    heard_at: float = 0.0
    gone: bool = False  # left the group, and stays out until told to join again

    def stop(self) -> None:
        self.member_id, self.generation, self.in_group, self.rejoin = "", -1, False, False
        self.running = set()


def _replicas(tasks: object) -> set[TaskReplica]:
    return {TaskReplica(t.task_id, t.replica) for t in tasks}  # type: ignore[attr-defined]


class ClassicFleet:
    """Classic members as the stock worker drives them: on ILLEGAL_GENERATION a member joins again
    under its member id (as Kafka's Java client, ``resetStateOnResponseError(..., false)``); only
    UNKNOWN_MEMBER_ID makes it join afresh."""

    def __init__(self, h: Harness, names: str, *, cooperative: bool = False) -> None:
        self.h = h
        self.members = {n: ClassicMember(n, cooperative) for n in names}

    def join(self, name: str) -> None:
        m = self.members[name]
        m.gone = False
        if not m.cooperative:
            m.running = set()  # eager: everything stops before the join
        metadata = pb.MemberMetadata(owned=[pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                            for t in sorted(m.running)])
        request = pb.JoinGroupRequest(
            group_id=G, member_id=m.member_id, client_id=name, session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=SESSION_MS, protocols=["round-robin"], metadata=metadata,
            rebalance_protocols=[COOPERATIVE] if m.cooperative else [])
        m.pending = ("join", self.h.run(lambda token: self.h.model.join(request, token, "test"), pb.JoinGroupResponse))
        m.rejoin = False
        self.step(name)

    def leave(self, name: str) -> int:
        m = self.members[name]
        code = self.h.leave(G, m.member_id)
        m.stop()
        m.gone, m.pending = True, None  # a join it had in flight is no longer its business
        return code

    def step(self, name: str) -> None:
        """What the member does next: handle an answer that came, else heartbeat (or join)."""
        m = self.members[name]
        if m.gone:
            return
        if m.pending is not None:
            kind, pending = m.pending
            if not pending.done:
                return
            m.pending = None
            if kind == "join":
                self._joined(m, pending.response)
            else:
                self._synced(m, pending.response)
            return
        if m.rejoin or not m.in_group:
            self.join(name)
            return
        code = self.h.heartbeat(G, m.member_id, m.generation)
        if code == pb.NONE:
            m.heard_at = self.h.clock.now()
        elif code in (pb.REBALANCE_IN_PROGRESS, pb.ILLEGAL_GENERATION):
            self.join(name)
        else:
            m.stop()

    def _joined(self, m: ClassicMember, response: pb.JoinGroupResponse) -> None:
        code = response.error.code
        if code == pb.MEMBER_ID_REQUIRED:
            m.member_id = response.member_id
            self.join(m.name)
            return
        if code != pb.NONE:
            if code in (pb.UNKNOWN_MEMBER_ID, pb.FENCED_INSTANCE_ID):
                m.stop()
            else:
                m.rejoin = True
            return
        m.member_id, m.generation, m.heard_at = response.member_id, response.generation, self.h.clock.now()
        if response.rebalance_protocol != COOPERATIVE:
            m.running = set()
        request = pb.SyncGroupRequest(group_id=G, member_id=m.member_id, generation=m.generation)
        if response.leader_id == m.member_id and not response.skip_assignment:
            request.assignments.extend(self._assign(response))
        m.pending = ("sync", self.h.run(lambda token: self.h.model.sync(request, token), pb.SyncGroupResponse))
        self.step(m.name)

    def _synced(self, m: ClassicMember, response: pb.SyncGroupResponse) -> None:
        code = response.error.code
        if code != pb.NONE:
            if code == pb.UNKNOWN_MEMBER_ID:
                m.stop()
            else:
                m.rejoin = True
            return
        given = _replicas(response.tasks)
        dropped = m.running - given
        m.running, m.in_group, m.heard_at = given, True, self.h.clock.now()
        m.rejoin = m.cooperative and (bool(dropped) or response.rejoin)

    @staticmethod
    def _assign(response: pb.JoinGroupResponse) -> list[pb.MemberAssignment]:
        """Keep what each member owns, deal the rest to the least loaded."""
        mine = {d.member_id: _replicas(d.assigned) for d in response.members}
        taken = set().union(*mine.values()) if mine else set()
        for task in response.tasks:
            for r in range(max(1, task.replicas)):
                replica = TaskReplica(task.task_id, r)
                if replica not in taken:
                    least = min(mine, key=lambda mid: (len(mine[mid]), mid))
                    mine[least].add(replica)
        return [pb.MemberAssignment(member_id=mid, tasks=[pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                                          for t in sorted(tasks)]) for mid, tasks in mine.items()]

    def expire_silent(self) -> None:
        """As the stock worker's ``_lose_if_unconfirmed`` (worker/member.py): a member that has heard
        nothing for a session stops its tasks and re-joins with the member id it has (the coordinator
        may still count it); only an UNKNOWN_MEMBER_ID answer then makes it join afresh. A member
        running nothing just heartbeats on."""
        now = self.h.clock.now()
        for m in self.members.values():
            if m.in_group and m.running and now >= m.heard_at + SESSION_MS / 1000:
                m.running, m.rejoin = set(), True

    def running(self) -> dict[str, set[TaskReplica]]:
        return {n: set(m.running) for n, m in self.members.items() if m.running}
