"""Helpers for testing against the coordinator model without a network.

``Harness`` wraps a GroupCoordinator on a FakeClock, collects held replies,
and checks every group's invariants after each request and timer step, so a
test that breaks an invariant fails where it happens. ``FailingStore`` wraps a
real store to make its next write fail (a fault at the edge, like a full disk).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from coordinator.clock import FakeClock
from coordinator.config import CoordinatorConfig
from coordinator.coordinator import GroupCoordinator
from coordinator.store import GroupRecord, GroupStore, StoreError
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["FailingStore", "Harness", "Pending"]


class Pending:
    """A held request's reply slot."""

    def __init__(self) -> None:
        self.response: Any = None
        self.calls = 0

    def __call__(self, response: Any) -> None:
        self.calls += 1
        assert self.calls == 1, "a reply was sent twice"
        self.response = response

    @property
    def done(self) -> bool:
        return self.response is not None

    @property
    def code(self) -> int:
        assert self.response is not None, "no reply yet"
        return int(self.response.error.code)


class Harness:
    def __init__(self, config: CoordinatorConfig | None = None, store: GroupStore | None = None) -> None:
        self.clock = FakeClock()
        self.coordinator = GroupCoordinator(
            config or CoordinatorConfig(group_initial_rebalance_delay_ms=0), clock=self.clock, store=store
        )

    def check(self) -> None:
        for group in self.coordinator.groups.values():
            group.validate()

    def advance(self, seconds: float) -> None:
        """Move the clock in small steps, firing timers as a server would."""
        target = self.clock.now() + seconds
        while True:
            deadline = self.coordinator.timers.next_deadline()
            if deadline is None or deadline > target:
                break
            self.clock.advance(max(0.0, deadline - self.clock.now()))
            self.coordinator.timers.poll()
            self.check()
        self.clock.advance(max(0.0, target - self.clock.now()))
        self.coordinator.timers.poll()
        self.check()

    def join(
        self, group_id: str, member_id: str = "", *, protocols: tuple[str, ...] = ("round-robin",),
        session_timeout_ms: int = 10_000, rebalance_timeout_ms: int = 30_000, metadata: pb.MemberMetadata | None = None,
        client_id: str = "w",
    ) -> Pending:
        pending = Pending()
        request = pb.JoinGroupRequest(
            group_id=group_id, member_id=member_id, client_id=client_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, protocols=list(protocols), metadata=metadata,
        )
        self.coordinator.join_group(request, pending, host="test")
        self.check()
        return pending

    def join_new(self, group_id: str, **kwargs: Any) -> tuple[str, Pending]:
        """Both steps of a new member's join; returns its id and the held second join."""
        first = self.join(group_id, **kwargs)
        assert first.code == pb.MEMBER_ID_REQUIRED, first.response
        return first.response.member_id, self.join(group_id, first.response.member_id, **kwargs)

    def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, list[str]] | None = None,
             **extra: Any) -> Pending:
        pending = Pending()
        request = pb.SyncGroupRequest(group_id=group_id, member_id=member_id, generation=generation, **extra)
        for mid, tasks in (assignments or {}).items():
            request.assignments.add(member_id=mid, tasks=[_replica(t) for t in tasks])
        self.coordinator.sync_group(request, pending)
        self.check()
        return pending

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> int:
        response = self.coordinator.heartbeat(
            pb.HeartbeatRequest(group_id=group_id, member_id=member_id, generation=generation))
        self.check()
        return int(response.error.code)

    def leave(self, group_id: str, member_id: str) -> int:
        response = self.coordinator.leave_group(pb.LeaveGroupRequest(group_id=group_id, member_id=member_id))
        self.check()
        return int(response.error.code)

    def put_tasks(self, group_id: str, *task_ids: str, replicas: int = 1, pool: str = "") -> int:
        response = self.coordinator.put_tasks(pb.PutTasksRequest(
            group_id=group_id, tasks=[pb.Task(task_id=t, replicas=replicas, pool=pool) for t in task_ids]))
        self.check()
        return int(response.error.code)

    def state(self, group_id: str) -> str:
        return self.coordinator.groups[group_id].state.value

    def group(self, group_id: str) -> Any:
        return self.coordinator.groups[group_id]


class FailingStore:
    """A real store whose next ``save`` (after ``fail_next_save()``) fails as SQLite does on a full disk."""

    def __init__(self, inner: GroupStore) -> None:
        self.inner = inner
        self.failures = 0
        self._armed = threading.Event()

    def fail_next_save(self) -> None:
        self._armed.set()

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        if self._armed.is_set():
            self._armed.clear()
            self.failures += 1
            raise StoreError(f"cannot save group {group_id!r}: database or disk is full")
        self.inner.save(group_id, record)

    def load_all(self) -> dict[str, GroupRecord]:
        return self.inner.load_all()

    def delete(self, group_id: str) -> None:
        self.inner.delete(group_id)

    def close(self) -> None:
        self.inner.close()


def _replica(text: str) -> pb.TaskReplica:
    task_id, _, replica = text.partition("#")
    return pb.TaskReplica(task_id=task_id, replica=int(replica or 0))
