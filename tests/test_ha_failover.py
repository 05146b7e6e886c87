"""Three coordinator processes on a real ZooKeeper, five worker processes; the active is SIGKILLed.

A standby must take over within the ZooKeeper session timeout plus a few
seconds, load the group, and keep it Stable with the same generation and
assignment (no rebalance: running tasks keep running). The workers' event
streams are the ownership log: no task is ever owned by two workers in the
same generation.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import grpc

from groupcoord.admin import AdminClient
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.zookeeper_server import ZooKeeperServer

G = "ha"
ZK_SESSION_S = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_coordinator(tmp: Path, name: str, zk: str, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    config = tmp / f"{name}.toml"
    config.write_text(
        "[server]\n"
        f'store = "zookeeper"\nzk = "{zk}"\nzk_session_timeout_s = {ZK_SESSION_S}\n'
        f'zk_root = "/groupcoord/test"\n'
        "[coordinator]\ngroup_min_session_timeout_ms = 500\ngroup_initial_rebalance_delay_ms = 0\n"
    )
    log = open(tmp / f"{name}.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}", "--advertise", f"127.0.0.1:{port}", "--data-dir", str(tmp / name)],
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


@pytest.mark.slow
@pytest.mark.zookeeper
def test_active_coordinator_killed_standby_takes_over(tmp_path: Path, cli_env: dict[str, str]) -> None:
    ports = [free_port() for _ in range(3)]
    addresses = [f"127.0.0.1:{p}" for p in ports]
    coordinators: list[subprocess.Popen[str]] = []
    workers: list[subprocess.Popen[str]] = []
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    lock = threading.Lock()

    def pump(name: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with lock:
                events[name].append(json.loads(line))

    with ZooKeeperServer() as zk:
        try:
            for i, port in enumerate(ports):
                coordinators.append(start_coordinator(tmp_path, f"c{i}", zk.hosts, port, cli_env))
            deadline = time.monotonic() + 60
            while active_address(addresses) is None:
                assert time.monotonic() < deadline, "no coordinator became active"
                time.sleep(0.1)
            all_addresses = ",".join(addresses)
            admin = AdminClient(all_addresses, timeout_s=2)
            tasks = [f"t{i}" for i in range(10)]
            admin.put_tasks(G, tasks)
            for i in range(5):
                proc = subprocess.Popen(
                    [sys.executable, "-m", "groupcoord.cli", "worker", "--group", G, "--coordinator", all_addresses,
                     "--name", f"w{i}", "--session-timeout-ms", "8000", "--heartbeat-interval-ms", "200"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env,
                )
                workers.append(proc)
                threading.Thread(target=pump, args=(f"w{i}", proc), daemon=True).start()

            def stable(d: pb.DescribeGroupResponse) -> bool:
                return d.state == pb.STABLE and len(d.members) == 5 and \
                    sum(len(m.assigned) for m in d.members) == len(tasks)

            before = admin.wait_for(G, stable, 90)
            assignment_before = {m.member.member_id: sorted(t.task_id for t in m.assigned) for m in before.members}
            active = active_address(addresses)
            assert active is not None
            victim = coordinators[addresses.index(active)]
            victim.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            victim.wait(10)
            others = [a for a in addresses if a != active]
            while active_address(others) is None:
                assert time.monotonic() - killed_at < ZK_SESSION_S + 8, "no standby took over in time"
                time.sleep(0.05)
            after = AdminClient(",".join(others), timeout_s=2).wait_for(G, stable, 15)
            took_over = time.monotonic() - killed_at
            assert took_over < ZK_SESSION_S + 8
            assert after.generation == before.generation, "failover caused a rebalance"
            assignment_after = {m.member.member_id: sorted(t.task_id for t in m.assigned) for m in after.members}
            assert assignment_after == assignment_before
            # the workers kept heartbeating to the new active: still Stable a few heartbeats later
            time.sleep(1.0)
            still = AdminClient(",".join(others), timeout_s=2).describe_group(G)
            assert still.state == pb.STABLE and still.generation == before.generation
        finally:
            for proc in workers + coordinators:
                if proc.poll() is None:
                    proc.terminate()
            for proc in workers + coordinators:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    owners: dict[tuple[int, str], set[str]] = defaultdict(set)
    with lock:
        for name, stream in events.items():
            for event in stream:
                if event["event"] == "assigned":
                    for task in event["tasks"]:
                        owners[(int(event["generation"]), task)].add(name)
    assert owners, "the workers logged no assignment"
    doubled = {k: v for k, v in owners.items() if len(v) > 1}
    assert not doubled, f"tasks owned twice in one generation: {doubled}"
