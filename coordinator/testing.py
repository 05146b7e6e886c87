"""Helpers for testing against the coordinator model without a network.

``Harness`` wraps a runtime on a FakeClock (writes done inline), collects held
replies and each step's effects, and checks every group's invariants after each
request and timer step, so a test that breaks an invariant fails where it happens.
``FakeOffice`` is an HA office set by hand. ``FailingStore`` wraps a
real store to make its next write fail (a fault at the edge, like a full disk).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.message import Message

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import Effect, Token
from groupcoord.coordinator.runtime.office import Office
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.runtime.writers import InlineWriter
from groupcoord.coordinator.storage.store import GroupRecord, GroupStore, StoreError
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["FailingStore", "FakeOffice", "Harness", "Pending"]


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


class FakeOffice:
    """An office a test sets by hand: ``in_office``, ``term`` and ``address`` are plain attributes."""

    def __init__(self, *, in_office: bool = True, term: int = 1, address: str = "") -> None:
        self.is_in_office = in_office
        self.current_term = term
        self.address = address
        self.stand_downs = 0
        self._watchers: list[Callable[[], object]] = []

    def in_office(self) -> bool:
        return self.is_in_office

    def term(self) -> int:
        return self.current_term

    def active_address(self) -> str:
        return self.address

    def watch(self, on_change: Callable[[], object]) -> None:
        self._watchers.append(on_change)

    def stand_down(self) -> None:
        self.stand_downs += 1

    def change(self, *, in_office: bool | None = None, term: int | None = None, address: str | None = None) -> None:
        """Change the verdict and tell the watchers, as an election callback would."""
        if in_office is not None:
            self.is_in_office = in_office
        if term is not None:
            self.current_term = term
        if address is not None:
            self.address = address
        for watcher in self._watchers:
            watcher()


class Harness:
    """A runtime on a FakeClock with writes done inline: every request is one model step whose
    effects are kept in ``effects``; every group's invariants are checked after each step."""

    def __init__(self, config: CoordinatorConfig | None = None, store: GroupStore | None = None,
                 office: Office | None = None) -> None:
        self.clock = FakeClock()
        self.runtime = CoordinatorRuntime(
            config or CoordinatorConfig(group_initial_rebalance_delay_ms=0), clock=self.clock, store=store,
            office=office, writer=InlineWriter(),
        )
        self.model = self.runtime.model
        self.effects: list[Effect] = []

    def check(self) -> None:
        self.model.validate()

    def run(self, call: Callable[[Token], list[Effect]], response_type: type[Message]) -> Pending:
        """One request through the runtime; its effects land in ``self.effects``."""
        pending = Pending()

        def step(token: Token) -> list[Effect]:
            self.effects = call(token)
            return self.effects

        self.runtime.submit(step, response_type, pending)
        self.check()
        return pending

    def advance(self, seconds: float) -> None:
        """Move the clock in small steps, firing timers as a server would."""
        timers = self.runtime.timers
        target = self.clock.now() + seconds
        while True:
            deadline = timers.next_deadline()
            if deadline is None or deadline > target:
                break
            self.clock.advance(max(0.0, deadline - self.clock.now()))
            self.runtime.poll_timers()
            self.check()
        self.clock.advance(max(0.0, target - self.clock.now()))
        self.runtime.poll_timers()
        self.check()

    def join(
        self, group_id: str, member_id: str = "", *, protocols: tuple[str, ...] = ("round-robin",),
        session_timeout_ms: int = 10_000, rebalance_timeout_ms: int = 30_000, metadata: pb.MemberMetadata | None = None,
        client_id: str = "w", instance_id: str = "", protocol_type: str = "",
    ) -> Pending:
        request = pb.JoinGroupRequest(
            group_id=group_id, member_id=member_id, client_id=client_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, protocols=list(protocols), metadata=metadata,
            instance_id=instance_id, protocol_type=protocol_type,
        )
        return self.run(lambda token: self.model.join(request, token, "test"), pb.JoinGroupResponse)

    def join_new(self, group_id: str, **kwargs: Any) -> tuple[str, Pending]:
        """Both steps of a new member's join; returns its id and the held second join."""
        first = self.join(group_id, **kwargs)
        assert first.code == pb.MEMBER_ID_REQUIRED, first.response
        return first.response.member_id, self.join(group_id, first.response.member_id, **kwargs)

    def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, list[str]] | None = None,
             **extra: Any) -> Pending:
        request = pb.SyncGroupRequest(group_id=group_id, member_id=member_id, generation=generation, **extra)
        for mid, tasks in (assignments or {}).items():
            request.assignments.add(member_id=mid, tasks=[_replica(t) for t in tasks])
        return self.run(lambda token: self.model.sync(request, token), pb.SyncGroupResponse)

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str = "") -> int:
        """Answered as the server answers it: at once where it can be (``CoordinatorRuntime.quick_heartbeat``;
        ``effects`` is then empty), else by the full step."""
        request = pb.HeartbeatRequest(group_id=group_id, member_id=member_id, generation=generation,
                                      instance_id=instance_id)
        answer = self.runtime.quick_heartbeat(request)
        if answer is not None:
            self.effects = []
            self.check()
            return int(answer.error.code)
        return self.run(lambda token: self.model.heartbeat(request, token), pb.HeartbeatResponse).code

    def leave(self, group_id: str, member_id: str, instance_id: str = "") -> int:
        request = pb.LeaveGroupRequest(group_id=group_id, member_id=member_id, instance_id=instance_id)
        return self.run(lambda token: self.model.leave(request, token), pb.LeaveGroupResponse).code

    def leave_batch(self, group_id: str, *members: tuple[str, str]) -> pb.LeaveGroupResponse:
        """LeaveGroup for several (member id, instance id) at once; the whole response."""
        request = pb.LeaveGroupRequest(group_id=group_id, members=[
            pb.MemberIdentity(member_id=member_id, instance_id=instance_id) for member_id, instance_id in members])
        response: pb.LeaveGroupResponse = self.run(lambda token: self.model.leave(request, token),
                                                   pb.LeaveGroupResponse).response
        return response

    def put_tasks(self, group_id: str, *task_ids: str, replicas: int = 1, pool: str = "") -> int:
        request = pb.PutTasksRequest(
            group_id=group_id, tasks=[pb.Task(task_id=t, replicas=replicas, pool=pool) for t in task_ids])
        return self.run(lambda token: self.model.put_tasks(request, token), pb.PutTasksResponse).code

    def admin(self, name: str, request: Message) -> Any:
        """An admin call by the model's method name (``delete_group``, ``describe_group``...); its response."""
        method = getattr(self.model, name)
        response_type = type(request).__name__.replace("Request", "Response")
        return self.run(lambda token: method(request, token), getattr(pb, response_type)).response

    def state(self, group_id: str) -> str:
        return self.model.groups[group_id].state.value

    def group(self, group_id: str) -> Any:
        return self.model.groups[group_id]


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
