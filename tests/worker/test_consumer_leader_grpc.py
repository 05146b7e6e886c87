"""The leader-side assignor end to end: consumer-protocol workers of both clients (``WorkerClient``,
``AsyncWorkerClient``) in a ``client:<name>`` group on a real coordinator over loopback gRPC.

The workers' assignor is known to them only (their ``assignor_lookup``; the coordinator's registry has no
such name), so a target that appears was computed by a worker. Every start and stop goes to one ownership
log, judged by the chaos suite's checker: no task on two members at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica
from groupcoord.assignors.registry import UnknownAssignorError, get_assignor
from groupcoord.coordinator.clock import Clock, FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.states import WorkerState
from tests.chaos.ownership import OwnershipLog, check, event
from tests.worker.member_drivers import DRIVERS, Driven

G = "g"
TASKS = [f"t{i}" for i in range(6)]
SESSION_MS = 3_000
BEAT_MS = 100


class Log:
    """The ownership log, in memory (one line per event, wall-clock seconds)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def write(self, what: str, worker: str, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            self.lines.append(event(what, time.time(), worker=f"{G}/{worker}", tasks=[str(t) for t in tasks]))

    def judge(self) -> None:
        report = check(OwnershipLog.parse(self.lines), session_s=SESSION_MS / 1000, rebalance_timeout_s=5,
                       heartbeat_s=BEAT_MS / 1000)
        assert not report.overlaps, [str(o) for o in report.overlaps]
        assert len(self.lines) > 2


class Recorder:
    def __init__(self, log: Log, name: str) -> None:
        self.log, self.name = log, name

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.log.write("assigned", self.name, tasks)

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.log.write("revoked", self.name, tasks)

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self.log.write("lost", self.name, tasks)


class LastTakesAll:
    """Every task to the member whose id sorts last: a result no built-in gives. ``hang`` holds a run
    (the leader "mid-request"); ``broken`` makes it raise."""

    def __init__(self, name: str = "last-takes-all") -> None:
        self.name = name
        self.runs: list[tuple[str, int]] = []  # (worker, epoch)
        self.hang = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.broken = False

    def for_worker(self, worker: str) -> Callable[[str], Any]:
        outer = self

        class Bound:
            name = outer.name

            def assign(self, context: AssignmentContext) -> Assignment:
                return outer.assign(worker, context)

        def lookup(name: str) -> Any:
            if name != outer.name:
                raise UnknownAssignorError(name)
            return Bound()
        return lookup

    def assign(self, worker: str, context: AssignmentContext) -> Assignment:
        self.runs.append((worker, context.generation))
        if self.broken:
            raise RuntimeError(f"{worker}'s assignor is broken")
        if self.hang.is_set():
            self.entered.set()
            self.release.wait(30)
        last = context.members[-1].member_id
        every = [r for t in context.tasks for r in t.replica_ids()]
        return Assignment({m.member_id: (every if m.member_id == last else []) for m in context.members})


@contextmanager
def serving(clock: Clock | None, assignment_interval_ms: int) -> Iterator[ServerThread]:
    settings = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                                 consumer_heartbeat_interval_ms=BEAT_MS,
                                 consumer_assignment_interval_ms=assignment_interval_ms)
    with ServerThread(CoordinatorRuntime(settings, clock=clock, on_change=lambda group: group.validate())) as running:
        AdminClient(running.address).put_tasks(G, TASKS)
        yield running


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with serving(None, 20) as running:
        yield running


@pytest.fixture
def still_server() -> Iterator[ServerThread]:
    """A coordinator whose clock stands still: its leader deadline (3 heartbeat intervals, 0.3 s) never
    passes, however slow the machine makes the leader (on the real clock a leader that answered late,
    at load ~83, had the target asked of another member). Nothing else here needs its time to move:
    with no assignment interval a target is asked for at once, and no session has to end."""
    with serving(FakeClock(), 0) as running:
        yield running


class Fleet:
    """The test's workers, closed once each at the end."""

    def __init__(self, server: ServerThread, log: Log, assignor: str) -> None:
        self.server, self.log, self.assignor = server, log, assignor
        self.members: dict[str, Driven] = {}
        self.closed: set[str] = set()

    def start(self, driver: str, name: str, lookup: Callable[[str], Any]) -> Driven:
        config = WorkerConfig(group_id=G, coordinators=(self.server.address,), client_id=name, protocol="consumer",
                              server_assignor=self.assignor, session_timeout_ms=SESSION_MS,
                              heartbeat_interval_ms=BEAT_MS, rebalance_timeout_ms=5000, retry_backoff_ms=20,
                              retry_backoff_max_ms=200)
        member = DRIVERS[driver](config, Recorder(self.log, name), assignor_lookup=lookup)
        self.members[name] = member
        member.start()
        assert member.wait(lambda c: c.state is WorkerState.STABLE, 20)  # in order: the first one leads
        return member

    def close(self, name: str, leave_group: bool | None = None) -> None:
        if name not in self.closed:
            self.closed.add(name)
            self.members[name].close(leave_group=leave_group)

    def close_all(self) -> None:
        for name in list(self.members):
            self.close(name)

    def live(self) -> dict[str, Driven]:
        return {name: m for name, m in self.members.items() if name not in self.closed}

    def settled(self, holder: Callable[[dict[str, Driven]], str | None], timeout: float = 30) -> bool:
        """Wait until ``holder`` (of the live members) runs every task and the others none."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.live()
            owner = holder(live)
            held = {name: {str(t) for t in m.client.assigned_tasks} for name, m in live.items()}
            if owner is not None and held[owner] == {f"{t}#0" for t in TASKS} and all(
                    not tasks for name, tasks in held.items() if name != owner) and all(
                    m.client.state is WorkerState.STABLE for m in live.values()):
                return True
            time.sleep(0.05)
        return False


def last_member(live: dict[str, Driven]) -> str | None:
    """The live worker whose member id sorts last (the one ``LastTakesAll`` gives everything)."""
    ids = {m.client.member_id: name for name, m in live.items() if m.client.member_id}
    return ids[max(ids)] if len(ids) == len(live) else None


def other(driver: str) -> str:
    return next(d for d in sorted(DRIVERS) if d != driver)


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_the_leader_worker_computes_the_target_the_coordinator_cannot(driver: str, still_server: ServerThread) -> None:
    server = still_server
    assignor, log = LastTakesAll(), Log()
    with pytest.raises(UnknownAssignorError):
        get_assignor(assignor.name)  # the coordinator (same process) has no such assignor: a worker computed it
    fleet = Fleet(server, log, f"client:{assignor.name}")
    try:
        fleet.start(driver, "a", assignor.for_worker("a"))  # the first member leads
        fleet.start(other(driver), "b", assignor.for_worker("b"))
        assert fleet.settled(last_member), log.lines
        fleet.start(other(driver), "c", assignor.for_worker("c"))
        assert fleet.settled(last_member), log.lines
        assert {worker for worker, _ in assignor.runs} == {"a"}  # only the leader ran it
        described = AdminClient(server.address).describe_group(G)
        assert described.leader_id == fleet.members["a"].client.member_id  # groups describe shows it
        epochs = [epoch for _, epoch in assignor.runs]
        assert epochs == sorted(epochs) and len(epochs) >= 2
    finally:
        fleet.close_all()
    log.judge()


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_leader_killed_mid_request_is_replaced_by_one_that_computes_it(driver: str, server: ServerThread) -> None:
    assignor, log = LastTakesAll(), Log()
    fleet = Fleet(server, log, f"client:{assignor.name}")
    try:
        fleet.start(driver, "a", assignor.for_worker("a"))
        fleet.start(other(driver), "b", assignor.for_worker("b"))
        assert fleet.settled(last_member), log.lines
        assignor.hang.set()  # a's next run never ends
        fleet.start(other(driver), "c", assignor.for_worker("c"))
        assert assignor.entered.wait(20)
        assignor.hang.clear()
        fleet.close("a", leave_group=False)  # killed: no leave; its session ends on the coordinator
        assert fleet.settled(last_member), log.lines  # b and c only: a new leader computed it
        assert {worker for worker, _ in assignor.runs} - {"a"}, assignor.runs
        leader = AdminClient(server.address).describe_group(G).leader_id
        assert leader in {fleet.members[n].client.member_id for n in "bc"}
    finally:
        assignor.release.set()
        fleet.close_all()
    log.judge()


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_leader_whose_assignor_raises_leaves_the_group_to_the_coordinators_fallback(
        driver: str, server: ServerThread) -> None:
    broken, log = LastTakesAll("sticky"), Log()  # the user's "sticky" is broken; the coordinator's works
    broken.broken = True
    fleet = Fleet(server, log, "client:sticky")
    try:
        for i, name in enumerate("abc"):
            fleet.start(driver if i % 2 == 0 else other(driver), name, broken.for_worker(name))

        def spread(live: dict[str, Driven]) -> bool:
            held = [{str(t) for t in m.client.assigned_tasks} for m in live.values()]
            return sum(map(len, held)) == len(TASKS) and set().union(*held) == {f"{t}#0" for t in TASKS} and all(
                len(h) == 2 and m.client.state is WorkerState.STABLE for h, m in zip(held, live.values(), strict=True))

        deadline = time.monotonic() + 30
        while not spread(fleet.live()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spread(fleet.live()), log.lines  # the coordinator's sticky: two each
        assert broken.runs  # the leader did try
    finally:
        fleet.close_all()
    log.judge()
