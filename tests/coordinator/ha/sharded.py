"""Shared parts of the sharded-cluster tests: ``groupcoord serve --sharded`` processes on one
ZooKeeper root, and the raw calls a client makes to find and reach a group's shard leader.

    with Cluster(tmp_path, zk, "/groupcoord/t", shards=64) as cluster:   # every process stopped at the end
        a, b = cluster.start_many(2)                     # on ports of their own, started together
        cluster.wait_balanced([a, b])
        c = cluster.start(zk_hosts=proxy.address)   # its ZooKeeper traffic goes through a fault proxy
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import grpc

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.chaos.cluster import env_with_tree
from tests.deadlines import Deadline
from tests.listening import announced
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer, wait_until

__all__ = ["RETRY", "Cluster", "call", "find", "find_many", "until_answered"]

RETRY = {pb.NOT_COORDINATOR, pb.COORDINATOR_LOAD_IN_PROGRESS, pb.COORDINATOR_NOT_AVAILABLE}
RETRY_STATUS = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}  # what a client calls again


@dataclass
class Cluster:
    """Coordinator processes of one test on their own ZooKeeper root."""

    tmp: Path
    zk: ZooKeeperServer
    root: str
    shards: int = 12
    zk_session_s: float = 2.0
    coordinator_section: str = "group_min_session_timeout_ms = 500\ngroup_initial_rebalance_delay_ms = 0\n"
    log_level: str = "info"
    addresses: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    started: dict[str, tuple[Path, subprocess.Popen[str]]] = field(default_factory=dict)  # address -> log, process

    def start(self, shards: int | None = None, *, zk_hosts: str = "") -> str:
        """Start one more coordinator (``zk_hosts``: where it reaches ZooKeeper, e.g. through a proxy); its
        address once it has bound its port."""
        return self.start_many(1, shards, zk_hosts=zk_hosts)[0]

    def start_many(self, n: int, shards: int | None = None, *, zk_hosts: str = "", startup_timeout: float = 180) -> list[str]:
        """Start ``n`` more coordinators at once (their imports overlap), each on a port of its own (port 0,
        advertised as bound); their addresses, read from their startup lines (tests/listening.py), once
        bound. The wait is a process start: its imports took tens of seconds at load 60-70, so it
        stretches with the load (tests/deadlines.py)."""
        launched = [self.launch(shards, zk_hosts) for _ in range(n)]
        for log, proc in launched:
            self.addresses.append(announced(log, proc, seconds=startup_timeout))
            self.started[self.addresses[-1]] = (log, proc)
        return self.addresses[-n:]

    def launch(self, shards: int | None = None, zk_hosts: str = "") -> tuple[Path, subprocess.Popen[str]]:
        """Start one more coordinator without waiting for it (one expected to refuse): its log and process."""
        name = f"c{len(self.procs)}"
        config = self.tmp / f"{name}.toml"
        config.write_text(
            "[server]\n"
            f'store = "zookeeper"\nzk = "{zk_hosts or self.zk.hosts}"\nzk_session_timeout_s = {self.zk_session_s}\n'
            f'zk_root = "{self.root}"\nsharded = true\nshards = {shards or self.shards}\n'
            "[coordinator]\n" + self.coordinator_section)
        log = open(self.tmp / f"{name}.log", "w")  # noqa: SIM115 - the child writes to it for its whole life
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "groupcoord.cli", "--log-level", self.log_level, "serve", "--config", str(config),
             "--listen", "127.0.0.1:0", "--data-dir", str(self.tmp / name)],
            stdout=log, stderr=subprocess.STDOUT, text=True, env=env_with_tree()))
        return self.tmp / f"{name}.log", self.procs[-1]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        stop_processes(self.procs)

    def proc_of(self, address: str) -> subprocess.Popen[str]:
        return self.started[address][1]

    def log_of(self, address: str) -> str:
        return self.started[address][0].read_text()

    def describe(self, address: str) -> pb.DescribeClusterResponse | None:
        with grpc.insecure_channel(address) as channel:
            try:
                answer: pb.DescribeClusterResponse = pb_grpc.GroupAdminStub(channel).DescribeCluster(
                    pb.DescribeClusterRequest(), timeout=2)
                return answer
            except grpc.RpcError:
                return None

    def leaders(self, address: str) -> dict[int, tuple[str, int]]:
        """shard -> (leader, epoch) as ``address`` sees it (leaderless shards left out)."""
        answer = self.describe(address)
        if answer is None:
            return {}
        return {s.shard: (s.leader, s.epoch) for s in answer.shard_infos if s.leader}

    def balanced(self, live: list[str]) -> bool:
        """Every shard led by a live coordinator, each leading shards // n or one more, as all of them see it."""
        views = [self.leaders(a) for a in live]
        if any(len(v) != self.shards for v in views) or any(v != views[0] for v in views):
            return False
        counts = [sum(1 for leader, _ in views[0].values() if leader == a) for a in live]
        return sum(counts) == self.shards and max(counts) - min(counts) <= 1

    def wait_balanced(self, live: list[str], timeout: float = 60,
                      startup_timeout: float = 180) -> dict[int, tuple[str, int]]:
        """Every coordinator of ``live`` answering (a process start: its imports took tens of seconds at load
        60-70, so it has a bound of its own, stretched by the load: tests/deadlines.py), then the shards balanced over them within
        ``timeout`` (the election's and the hand-overs' time: the product's)."""
        started = Deadline(startup_timeout)
        while not all(self.describe(a) is not None for a in live):
            assert not started.passed(), f"{live} not answering after {started.elapsed():.0f}s"
            time.sleep(0.05)
        wait_until(lambda: self.balanced(live), timeout, f"shards balanced over {live}")
        return self.leaders(live[0])


def call(address: str, method: str, request: object, timeout: float = 5) -> object:
    """One raw call (GroupAdmin for the admin RPCs, GroupCoordinator otherwise) on a fresh channel."""
    with grpc.insecure_channel(address) as channel:
        admin = method in ("PutTasks", "DescribeGroup", "ListGroups", "DescribeCluster")
        stub = pb_grpc.GroupAdminStub(channel) if admin else pb_grpc.GroupCoordinatorStub(channel)
        return getattr(stub, method)(request, timeout=timeout)


def find_many(address: str, group_ids: list[str]) -> list[pb.CoordinatorLocation]:
    answer = call(address, "FindCoordinator", pb.FindCoordinatorRequest(group_ids=group_ids))
    assert isinstance(answer, pb.FindCoordinatorResponse)
    return list(answer.coordinators)


def find(address: str, group_id: str) -> pb.CoordinatorLocation:
    return find_many(address, [group_id])[0]


def until_answered(ask: Callable[[str], object], bootstrap: str, group_id: str, timeout: float = 30) -> object:
    """``ask(leader address)`` until it answers something other than a retriable coordinator error,
    rediscovering the leader each time, as a client does; a call that times out or finds nobody listening
    is tried again too (a coordinator loading the shards it just took answered no FindCoordinator within
    5 s at load 60-70)."""
    deadline = Deadline(timeout)  # an election's and a load's time: longer on a loaded machine
    while True:
        try:
            where = find(bootstrap, group_id)
            if where.error.code == pb.NONE:
                answer = ask(where.address)
                if answer.error.code not in RETRY:  # type: ignore[attr-defined]
                    return answer
        except grpc.RpcError as error:
            if error.code() not in RETRY_STATUS:  # type: ignore[attr-defined]
                raise
        assert not deadline.passed(), f"group {group_id}: no answer from its coordinator"
        time.sleep(0.05)  # a client's retry backoff
