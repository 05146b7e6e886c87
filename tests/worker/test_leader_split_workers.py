"""A ``client:pulsar-*`` group's split end to end: consumer-protocol workers of both clients on a real
coordinator over loopback gRPC, the leader worker running Pulsar's assignor (an instance of its own, as
in its own process), under a name the coordinator has no assignor for: a split in the catalog can only
be the leader's (a slow leader on a loaded machine is asked again, never replaced by the coordinator's
own pass). A hot snapshot and a member joining make the leader's full pass split the hot task: the
leader sends the split in its ``TargetAnswer``, the coordinator applies it (no answer refused), and no
worker starts a child while another still runs the parent."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.registry import UnknownAssignorError, get_assignor
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.states import WorkerState
from tests.coordinator.model.test_consumer_split import CATALOG, HALVES, hot_snapshot
from tests.worker.member_drivers import DRIVERS, Driven

G = "g"
BEAT_MS = 200


class Events:
    """Every start and stop of every worker, in the order they happened."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []  # (what, worker, task id)
        self.lock = threading.Lock()

    def listener(self, worker: str) -> Any:
        events = self

        class Recorder:
            def on_assigned(self, tasks: list[TaskReplica], generation: int) -> None:
                events.add("start", worker, tasks)

            def on_revoked(self, tasks: list[TaskReplica]) -> None:
                events.add("stop", worker, tasks)

            def on_lost(self, tasks: list[TaskReplica]) -> None:
                events.add("stop", worker, tasks)
        return Recorder()

    def add(self, what: str, worker: str, tasks: list[TaskReplica]) -> None:
        with self.lock:
            self.seen += [(what, worker, t.task_id) for t in tasks]

    def assert_no_range_twice(self) -> None:
        """Replay: no task on two workers, and no child started while another worker runs its parent."""
        running: dict[str, str] = {}  # task id -> worker
        for what, worker, task in self.seen:
            if what == "stop":
                running.pop(task, None)
                continue
            overlapping = [t for t in running if t == task or task.startswith(t + "/") or t.startswith(task + "/")]
            assert all(running[t] == worker for t in overlapping), (task, worker, running)
            running[task] = worker


SLOW = ("did not answer within", "left the group before it answered")  # the machine's load, not a refusal
ASSIGNOR = "test-pulsar-avg"  # Pulsar's avg-shedder assignor, known to the workers only


def lookup_of() -> Callable[[str], Any]:
    own = type(get_assignor("pulsar-avg"))()  # the worker's own instance (per-group state of its own)

    def lookup(asked: str) -> Any:
        if asked != ASSIGNOR:
            raise UnknownAssignorError(asked)
        return own
    return lookup


@pytest.fixture
def server() -> Iterator[ServerThread]:
    settings = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                                 consumer_heartbeat_interval_ms=BEAT_MS, consumer_assignment_interval_ms=20)
    with ServerThread(CoordinatorRuntime(settings, on_change=lambda group: group.validate())) as running:
        AdminClient(running.address).put_task_messages(G, CATALOG.tasks)
        yield running


def start(server: ServerThread, driver: str, name: str, events: Events) -> Driven:
    config = WorkerConfig(group_id=G, coordinators=(server.address,), client_id=name, protocol="consumer",
                          server_assignor=f"client:{ASSIGNOR}", session_timeout_ms=10_000, heartbeat_interval_ms=BEAT_MS,
                          rebalance_timeout_ms=5_000, retry_backoff_ms=20, retry_backoff_max_ms=200)
    member = DRIVERS[driver](config, events.listener(name), assignor_lookup=lookup_of())
    member.start()
    assert member.wait(lambda c: c.state is WorkerState.STABLE, 20)
    return member


def current_target(server: ServerThread) -> bool:
    """On the server's loop: the group's target is for its epoch, and none is being computed."""
    group = server.runtime.model.consumer.groups[G]
    return group.target_epoch == group.epoch and not group.computing


def settled(server: ServerThread, members: list[Driven], tasks: set[str], timeout: float = 60) -> bool:
    """Wait until the group's target is current and the workers run ``tasks``, each once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = [t.task_id for m in members for t in m.client.assigned_tasks]
        current = server.call(lambda: current_target(server))
        if current and sorted(held) == sorted(tasks) and all(m.client.state is WorkerState.STABLE for m in members):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_the_leader_workers_split_is_applied_without_the_fallback(driver: str, server: ServerThread,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord.consumer")
    with pytest.raises(UnknownAssignorError):
        get_assignor(ASSIGNOR)  # the coordinator (same process) cannot split: the split is the leader's
    events = Events()
    other = next(d for d in sorted(DRIVERS) if d != driver)
    members = [start(server, driver, "a", events)]  # the first member leads: the driver under test sends the split
    try:
        members.append(start(server, other, "b", events))
        assert settled(server, members, {"orders", "other"}), events.seen
        version = server.call(lambda: server.runtime.model.groups[G].catalog_version)
        snapshot = server.call(lambda: hot_snapshot(server.runtime.model, int(time.time() * 1000)))
        AdminClient(server.address).publish_load_snapshot(snapshot)
        members.append(start(server, other, "c", events))  # the epoch moves: the leader's full pass splits
        assert settled(server, members, HALVES | {"other"}), events.seen
        classic = server.call(lambda: server.runtime.model.groups[G])
        assert server.call(lambda: (set(classic.tasks), classic.catalog_version)) == (HALVES | {"other"}, version + 1)
        group = server.call(lambda: server.runtime.model.consumer.groups[G])
        assert server.call(lambda: group.last_error) == ""
        refused = [r.getMessage() for r in caplog.records if getattr(r, "event", "") == "leader_target_failed"
                   and not any(slow in r.getMessage() for slow in SLOW)]
        assert refused == []  # the leader's answer with its split was taken as it came
        assert any(r.getMessage().startswith(f"group {G}: split orders into 2 task(s)") for r in caplog.records)
    finally:
        for member in members:
            member.close()
    events.assert_no_range_twice()
