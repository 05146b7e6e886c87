"""Three coordinator processes on a real ZooKeeper and a few worker processes; the active fails.

SIGKILL: a standby must take over within the ZooKeeper session timeout plus a few seconds, load the
group, and keep it Stable with the same generation and assignment (no rebalance: running tasks keep
running). SIGSTOP then SIGCONT: the same, and the old active, resumed after its session has expired,
must never answer as the active. The workers' event streams are the ownership log: no task is ever
owned by two workers in the same generation.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from groupcoord.admin import AdminClient
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.deadlines import Deadline, keep_waiting
from tests.listening import announced
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer

G = "ha"
ZK_SESSION_S = 2.0
HEARTBEAT_MS = 200
TASKS = [f"t{i}" for i in range(10)]
STOPPED_ACTING = "stops acting as the active coordinator"


def start_coordinator(tmp: Path, name: str, zk: str, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    """A coordinator advertising the port it bound (``port`` 0: any free one, read with
    tests/listening.announced from ``tmp/<name>.log``)."""
    config = tmp / f"{name}.toml"
    config.write_text(
        "[server]\n"
        f'store = "zookeeper"\nzk = "{zk}"\nzk_session_timeout_s = {ZK_SESSION_S}\n'
        f'zk_root = "/groupcoord/test"\n'
        "[coordinator]\ngroup_min_session_timeout_ms = 500\ngroup_initial_rebalance_delay_ms = 0\n"
    )
    log = open(tmp / f"{name}.log", "w")  # noqa: SIM115 - the child writes to it for its whole life
    return subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp / name)],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
    )


def active_address(addresses: list[str]) -> str | None:
    """The address that answers as the active coordinator itself (no following of hints)."""
    for address in addresses:
        with grpc.insecure_channel(address) as channel:
            try:
                response = pb_grpc.GroupAdminStub(channel).ListGroups(pb.ListGroupsRequest(), timeout=1)
            except grpc.RpcError:
                continue
            if response.error.code == pb.NONE:
                return address
    return None


@dataclass
class HaCluster:
    """ZooKeeper, three coordinator processes and the worker processes of one test."""

    tmp: Path
    env: dict[str, str]
    zk: ZooKeeperServer
    addresses: list[str] = field(default_factory=list)
    coordinators: list[subprocess.Popen[str]] = field(default_factory=list)
    workers: list[subprocess.Popen[str]] = field(default_factory=list)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def every_address(self) -> str:
        return ",".join(self.addresses)

    def start_coordinators(self, n: int = 3) -> None:
        """Start ``n`` at once (their imports overlap); return once each has bound its port (a process start,
        stretched by the load: tests/deadlines.py)."""
        names = [f"c{len(self.coordinators) + i}" for i in range(n)]
        started = [start_coordinator(self.tmp, name, self.zk.hosts, 0, self.env) for name in names]
        self.coordinators += started
        self.addresses += [announced(self.tmp / f"{name}.log", proc) for name, proc in zip(names, started, strict=True)]

    def wait_for_active(self, among: list[str] | None = None, timeout: float | None = None) -> str:
        """The active coordinator's address. ``timeout``: a takeover's bound (the product's, fixed); without
        it, the processes' start and first election, 60 s stretched by the load (tests/deadlines.py)."""
        deadline = Deadline(60) if timeout is None else Deadline(timeout, cap=1.0)
        while (active := active_address(among or self.addresses)) is None:
            assert not deadline.passed(), f"no coordinator became active in {deadline.elapsed():.0f} s"
            time.sleep(0.05)  # polling with a deadline
        return active

    def start_workers(self, n: int, session_timeout_ms: int) -> None:
        for i in range(n):
            proc = subprocess.Popen(
                [sys.executable, "-m", "groupcoord.cli", "worker", "--group", G, "--coordinator", self.every_address,
                 "--name", f"w{i}", "--session-timeout-ms", str(session_timeout_ms),
                 "--heartbeat-interval-ms", str(HEARTBEAT_MS)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self.env,
            )
            self.workers.append(proc)
            threading.Thread(target=self._pump, args=(f"w{i}", proc), daemon=True).start()

    def _pump(self, name: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.lock:
                self.events[name].append(json.loads(line))

    def process_at(self, address: str) -> subprocess.Popen[str]:
        return self.coordinators[self.addresses.index(address)]

    def log_of(self, address: str) -> str:
        return (self.tmp / f"c{self.addresses.index(address)}.log").read_text()

    def stop(self) -> None:
        """End every process (a SIGSTOPped one is continued first, so that it can exit on SIGTERM)."""
        stop_processes(self.workers + self.coordinators)

    def tasks_owned_twice(self) -> dict[tuple[int, str], set[str]]:
        """(generation, task) -> workers, where more than one worker was assigned the task in that generation."""
        owners: dict[tuple[int, str], set[str]] = defaultdict(set)
        with self.lock:
            for name, stream in self.events.items():
                for event in stream:
                    if event["event"] == "assigned":
                        for task in event["tasks"]:
                            owners[(int(event["generation"]), task)].add(name)
        assert owners, "the workers logged no assignment"
        return {k: v for k, v in owners.items() if len(v) > 1}


@pytest.fixture
def ha_cluster(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[HaCluster]:
    """ZooKeeper and three coordinators, one of them active; every process is ended at teardown."""
    with ZooKeeperServer() as zk:
        cluster = HaCluster(tmp_path, cli_env, zk)
        try:
            cluster.start_coordinators()
            cluster.wait_for_active()
            yield cluster
        finally:
            cluster.stop()


def stable_with(workers: int) -> Callable[[pb.DescribeGroupResponse], bool]:
    def stable(d: pb.DescribeGroupResponse) -> bool:
        return d.state == pb.STABLE and len(d.members) == workers and \
            sum(len(m.assigned) for m in d.members) == len(TASKS)

    return stable


def form_group(cluster: HaCluster, workers: int, session_timeout_ms: int) -> pb.DescribeGroupResponse:
    """The task catalog, ``workers`` worker processes, and the group Stable with all tasks assigned."""
    with AdminClient(cluster.every_address, timeout_s=2) as admin:
        admin.put_tasks(G, TASKS)
        cluster.start_workers(workers, session_timeout_ms)
        # worker processes starting (their imports): 90 s, stretched by the load
        return keep_waiting(lambda step: admin.wait_for(G, stable_with(workers), step), 90)


def assignment_of(d: pb.DescribeGroupResponse) -> dict[str, list[str]]:
    return {m.member.member_id: sorted(t.task_id for t in m.assigned) for m in d.members}


def assert_unchanged(d: pb.DescribeGroupResponse, before: pb.DescribeGroupResponse) -> None:
    """Same Stable generation, same members (the assignment's keys) with the same tasks."""
    assert d.state == pb.STABLE, pb.GroupState.Name(d.state)
    assert d.generation == before.generation, "failover caused a rebalance"
    assert assignment_of(d) == assignment_of(before)


def assert_stays_unchanged(admin: AdminClient, before: pb.DescribeGroupResponse, seconds: float) -> None:
    """Poll the group for ``seconds``: every answer is the same Stable generation and assignment."""
    deadline = time.monotonic() + seconds
    polls = 0
    while time.monotonic() < deadline or polls < 2:
        assert_unchanged(admin.describe_group(G), before)
        polls += 1


@pytest.mark.slow
@pytest.mark.zookeeper
def test_active_coordinator_killed_standby_takes_over(ha_cluster: HaCluster) -> None:
    cluster = ha_cluster
    before = form_group(cluster, workers=5, session_timeout_ms=8000)
    active = cluster.wait_for_active()
    victim = cluster.process_at(active)
    victim.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.wait(10)
    others = [a for a in cluster.addresses if a != active]
    cluster.wait_for_active(others, timeout=ZK_SESSION_S + 8)
    with AdminClient(",".join(others), timeout_s=2) as admin:
        after = admin.wait_for(G, stable_with(5), 15)
        assert time.monotonic() - killed_at < ZK_SESSION_S + 8, "no standby took over in time"
        assert_unchanged(after, before)
        # the workers keep heartbeating to the new active: still Stable, same generation
        assert_stays_unchanged(admin, before, 5 * HEARTBEAT_MS / 1000)
    cluster.stop()
    assert not cluster.tasks_owned_twice()


def _ask_old_active(stub: pb_grpc.GroupCoordinatorStub, admin: pb_grpc.GroupAdminStub,
                    member: pb.DescribedMember, generation: int) -> list[tuple[str, Any]]:
    """One round of requests to the resumed coordinator: (method, response or gRPC status code)."""
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("ListGroups", lambda: admin.ListGroups(pb.ListGroupsRequest(), timeout=5)),
        ("Heartbeat", lambda: stub.Heartbeat(pb.HeartbeatRequest(
            group_id=G, member_id=member.member.member_id, generation=generation), timeout=5)),
        ("DescribeGroup", lambda: admin.DescribeGroup(pb.DescribeGroupRequest(group_id=G), timeout=5)),
    ]
    answers: list[tuple[str, Any]] = []
    for method, call in calls:
        try:
            answers.append((method, call()))
        except grpc.RpcError as error:
            answers.append((method, error.code()))
    return answers


_NOT_ACTIVE = {pb.NOT_COORDINATOR, pb.COORDINATOR_LOAD_IN_PROGRESS}
#: a resumed process may also fail a request outright (fenced write) or not answer in time: neither is a success
_NO_ANSWER = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


@pytest.mark.slow
@pytest.mark.heavy  # a SIGSTOP past the ZooKeeper session: 18-21 s
@pytest.mark.zookeeper
def test_paused_active_resumes_as_standby(ha_cluster: HaCluster) -> None:
    cluster = ha_cluster
    worker_session_s = 10.0
    before = form_group(cluster, workers=3, session_timeout_ms=int(worker_session_s * 1000))
    old = cluster.wait_for_active()
    paused = cluster.process_at(old)
    paused.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    others = [a for a in cluster.addresses if a != old]
    new = cluster.wait_for_active(others, timeout=ZK_SESSION_S + 8)
    took_over_at = time.monotonic()
    with AdminClient(new, timeout_s=2) as admin:
        assert_unchanged(admin.wait_for(G, stable_with(3), 15), before)

        # The workers' heartbeats to the stopped process time out within their session and they find the
        # new active: a member heard from since the takeover (not just the load) has a fresh last_seen.
        # The pause lasts past the members' sessions too, so the old process resumes with every
        # member's session timer due: none may fire.
        def heard_from_all_and_sessions_over(d: pb.DescribeGroupResponse) -> bool:
            fresh = all(m.last_seen_ms_ago < 1000 for m in d.members)
            now = time.monotonic()
            return stable_with(3)(d) and fresh and now - took_over_at > 2 and now - stopped_at > worker_session_s + 1

        assert_unchanged(admin.wait_for(G, heard_from_all_and_sessions_over, worker_session_s + 10), before)

        log_before_resume = cluster.log_of(old)
        paused.send_signal(signal.SIGCONT)
        answers: list[tuple[str, Any]] = []
        deadline = time.monotonic() + 30
        with grpc.insecure_channel(old) as channel:
            stub, admin_stub = pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)
            while True:
                round_ = _ask_old_active(stub, admin_stub, before.members[0], before.generation)
                answers.extend(round_)
                if all(not isinstance(r, grpc.StatusCode) and r.error.code == pb.NOT_COORDINATOR
                       and r.error.coordinator_hint == new for _, r in round_):
                    break
                assert time.monotonic() < deadline, f"the resumed coordinator never pointed to {new}: {round_}"
        successes = [(m, r) for m, r in answers
                     if not (r in _NO_ANSWER if isinstance(r, grpc.StatusCode) else r.error.code in _NOT_ACTIVE)]
        assert not successes, f"the resumed old active answered as the active: {successes}"

        assert_stays_unchanged(admin, before, 2 * HEARTBEAT_MS / 1000)
    cluster.stop()
    assert not cluster.tasks_owned_twice()
    resumed_log = cluster.log_of(old)[len(log_before_resume):]
    assert STOPPED_ACTING in resumed_log
    assert f"group {G}:" not in resumed_log, f"the resumed old active changed the group:\n{resumed_log}"
