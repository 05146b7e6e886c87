"""Consumer-protocol workers as real processes, both clients mixed, against a real coordinator on loopback.

Threaded workers are ``groupcoord worker --protocol consumer``; asyncio ones are
``tests/worker/consumer_member_proc.py``. All write one ``O_APPEND`` ownership log, which the chaos
suite's checker (``tests/chaos/ownership.py``) judges: no task on two workers at once, a SIGSTOPped
worker excepted only for the moment after its SIGCONT until it notices its session is gone.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from tests.chaos.ownership import OwnershipLog, check, event
from tests.deadlines import Deadline
from tests.processes import stop_processes

G = "cproc"
TASKS = [f"t{i:02d}" for i in range(12)]
SESSION_MS = 3000
HEARTBEAT_MS = 200
STATIC_SESSION_MS = 60_000  # the away member's tasks wait this long: longer than a process start at load 50


@pytest.fixture
def consumer_server() -> Iterator[ServerThread]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               consumer_heartbeat_interval_ms=HEARTBEAT_MS, consumer_assignment_interval_ms=50)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as running:
        yield running


class Fleet:
    """The worker processes of one test and their shared ownership log."""

    def __init__(self, address: str, log: Path, env: dict[str, str]) -> None:
        self.address = address
        self.log = log
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._fault = 0

    def start(self, name: str, driver: str, instance_id: str = "", session_ms: int = SESSION_MS,
              extra: tuple[str, ...] = ()) -> None:
        if driver == "cli":
            argv = [sys.executable, "-m", "groupcoord.cli", "worker", "--protocol", "consumer", "--group", G,
                    "--coordinator", self.address, "--name", name, "--session-timeout-ms", str(session_ms),
                    "--heartbeat-interval-ms", "100", *extra]
        else:
            argv = [sys.executable, "-m", "tests.worker.consumer_member_proc", "--driver", driver, "--group", G,
                    "--coordinator", self.address, "--name", name, "--session-timeout-ms", str(session_ms)]
        if instance_id:
            argv += ["--instance-id", instance_id]
        out = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=self.env,
                                                cwd=Path(__file__).resolve().parents[2])
        finally:
            os.close(out)

    def note(self, what: str, **fields: object) -> None:
        with self.log.open("a") as handle:
            handle.write(event(what, time.time(), **fields))

    def fault(self, kind: str, target: str, phase: str) -> None:
        if phase == "inject":
            self._fault += 1
        self.note("fault", id=self._fault, kind=kind, phase=phase, target=target, group=G)

    def owners(self) -> dict[str, set[str]]:
        """Worker -> the tasks it runs now, by the log."""
        running: dict[str, set[str]] = {}
        if not self.log.exists():
            return running
        for task, intervals in OwnershipLog.read(self.log).intervals.items():
            for interval in intervals:
                if math.isinf(interval.stop):
                    running.setdefault(interval.worker, set()).add(task)
        return running

    def wait(self, predicate: Callable[[dict[str, set[str]]], bool], timeout: float, what: str) -> dict[str, set[str]]:
        # a hang guard stretched by the load (tests/deadlines.py): most waits include a process's start, and
        # three of them had started no task in 60 s at load 40; the checker judges the product's bounds
        deadline = Deadline(timeout)
        while not deadline.passed():
            owners = self.owners()
            if predicate(owners):
                return owners
            time.sleep(0.05)
        raise AssertionError(f"not {what} within {deadline.elapsed():.0f}s: {self.owners()}")


def spread_over(names: set[str]) -> Callable[[dict[str, set[str]]], bool]:
    """Every task runs once, on exactly ``names``, as evenly as the count allows."""
    def check_(owners: dict[str, set[str]]) -> bool:
        busy = {w for w, tasks in owners.items() if tasks}
        counts = [len(owners.get(w, ())) for w in names]
        every = sorted(t for tasks in owners.values() for t in tasks)
        return busy == names and every == TASKS and max(counts) - min(counts) <= 1
    return check_


@pytest.mark.slow
@pytest.mark.heavy  # worker processes of both clients, killed, stopped and restarted: 14-38 s of a 4-worker make test; CI runs it in make test-heavy
def test_mixed_clients_share_a_catalog_and_no_task_runs_twice(consumer_server: ServerThread, tmp_path: Path,
                                                             cli_env: dict[str, str]) -> None:
    AdminClient(consumer_server.address).put_tasks(G, TASKS)
    log = tmp_path / "ownership.log"
    fleet = Fleet(consumer_server.address, log, cli_env)
    w1, w2, w3, w4 = (f"{G}/w{i}#1" for i in range(1, 5))
    try:
        fleet.start(w1, "cli")
        fleet.start(w2, "asyncio")
        fleet.start(w3, "cli", instance_id="s3", session_ms=STATIC_SESSION_MS)
        fleet.wait(spread_over({w1, w2, w3}), 60, "spread over three workers")

        fleet.start(w4, "asyncio")  # a fourth joins: tasks move, each only once its owner let it go
        fleet.wait(spread_over({w1, w2, w3, w4}), 30, "spread over four workers")

        fleet.fault("worker_kill", w1, "inject")  # killed: its session ends and its tasks move
        fleet.procs[w1].kill()
        fleet.procs[w1].wait(10)
        fleet.fault("worker_kill", w1, "heal")
        fleet.wait(spread_over({w2, w3, w4}), 30, "spread over the three survivors")

        static_tasks = fleet.owners()[w3]
        others = {w: set(tasks) for w, tasks in fleet.owners().items() if w != w3}
        fleet.procs[w3].terminate()  # a static member away (-2): its tasks wait for it
        assert fleet.procs[w3].wait(20) == 0
        back = f"{G}/w3#2"
        fleet.start(back, "cli", instance_id="s3", session_ms=STATIC_SESSION_MS)
        owners = fleet.wait(lambda o: o.get(back) == static_tasks, 30, "the static member's tasks back")
        assert {w: tasks for w, tasks in owners.items() if w not in (w3, back) and tasks} == others

        paused = fleet.owners()[w2]  # a long pause: the coordinator ends its session and moves its tasks
        fleet.fault("worker_stop", w2, "inject")
        fleet.procs[w2].send_signal(signal.SIGSTOP)
        fleet.wait(lambda o: all(any(t in tasks for w, tasks in o.items() if w != w2) for t in paused), 30,
                   "the paused worker's tasks moved")
        fleet.fault("worker_stop", w2, "heal")  # logged first: its stop is then never before the heal
        fleet.procs[w2].send_signal(signal.SIGCONT)
        fleet.wait(lambda o: not paused <= o.get(w2, set()), 15, "the paused worker stopped its old tasks")
        fleet.wait(lambda o: sorted(t for ts in o.values() for t in ts) == TASKS, 30, "every task running once")
    finally:
        fleet.note("end")
        stop_processes(fleet.procs.values())
    # the coordinator extends sessions by the time its own loop lost (a loaded machine): so may the gaps
    lost = consumer_server.runtime.lag.lost()
    report = check(OwnershipLog.read(log), session_s=SESSION_MS / 1000, rebalance_timeout_s=10 + lost,
                   heartbeat_s=HEARTBEAT_MS / 1000)
    assert report.violations == [], "\n".join(report.violations)
    overlaps = [o for o in report.overlaps if o.allowed]
    assert all(o.first.worker == w2 for o in overlaps)  # only the paused worker, and only until it woke
    assert len(report.stop_notice) == 1  # it stopped them as it woke, within the checker's notice bound


@pytest.mark.slow
@pytest.mark.heavy  # three worker processes, the leader SIGKILLed
def test_a_sigkilled_leader_of_a_client_assignor_group_is_replaced(consumer_server: ServerThread, tmp_path: Path,
                                                                  cli_env: dict[str, str]) -> None:
    """``groupcoord worker --server-assignor client:sticky``: the leader worker computes the target; SIGKILLed,
    a survivor leads once its session ends, and no task ever runs on two workers."""
    AdminClient(consumer_server.address).put_tasks(G, TASKS)
    log = tmp_path / "ownership.log"
    fleet = Fleet(consumer_server.address, log, cli_env)
    names = [f"{G}/w{i}#1" for i in range(1, 4)]
    try:
        for name in names:
            fleet.start(name, "cli", extra=("--server-assignor", "client:sticky"))
        fleet.wait(spread_over(set(names)), 60, "spread over three workers")
        joined = {json.loads(line)["member_id"]: json.loads(line)["worker"] for line in log.read_text().splitlines()
                  if '"joined"' in line}
        leader = joined[AdminClient(consumer_server.address).describe_group(G).leader_id]
        fleet.fault("worker_kill", leader, "inject")
        fleet.procs[leader].kill()
        fleet.procs[leader].wait(10)
        fleet.fault("worker_kill", leader, "heal")
        survivors = set(names) - {leader}
        fleet.wait(spread_over(survivors), 30, "spread over the two survivors")
        assert joined[AdminClient(consumer_server.address).describe_group(G).leader_id] in survivors
    finally:
        fleet.note("end")
        stop_processes(fleet.procs.values())
    lost = consumer_server.runtime.lag.lost()
    report = check(OwnershipLog.read(log), session_s=SESSION_MS / 1000, rebalance_timeout_s=10 + lost,
                   heartbeat_s=HEARTBEAT_MS / 1000)
    assert report.violations == [] and report.overlaps == [], "\n".join(report.violations)
