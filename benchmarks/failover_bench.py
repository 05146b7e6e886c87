"""Failover time: the active coordinator is SIGKILLed -> the group is Stable again on a standby.

    python benchmarks/failover_bench.py [--quick] [--runs N]

A real ZooKeeper (Debian's package), three coordinator processes (ZooKeeper
session timeout 2 s), three worker processes; each run kills the active,
times until a standby answers with the group Stable (same generation), then
restarts the killed one so three coordinators stand again.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from groupcoord.admin import AdminClient
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.ha.test_ha_failover import ZK_SESSION_S, active_address, start_coordinator
from tests.zookeeper_server import ZooKeeperServer, free_port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    tmp = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    ports = [free_port() for _ in range(3)]
    addresses = [f"127.0.0.1:{p}" for p in ports]
    every = ",".join(addresses)
    with ZooKeeperServer() as zk:
        coordinators = [start_coordinator(tmp, f"c{i}", zk.hosts, p, env) for i, p in enumerate(ports)]
        workers = []
        try:
            while active_address(addresses) is None:
                time.sleep(0.1)
            admin = AdminClient(every, timeout_s=2)
            admin.put_tasks("fo", [f"t{i}" for i in range(6)])
            for i in range(3):
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "groupcoord.cli", "worker", "--group", "fo", "--coordinator", every,
                     "--name", f"w{i}", "--session-timeout-ms", "10000", "--heartbeat-interval-ms", "200"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))

            def stable(d: pb.DescribeGroupResponse) -> bool:
                return d.state == pb.STABLE and len(d.members) == 3 and sum(len(m.assigned) for m in d.members) == 6

            times = []
            rebalances = 0
            for run in range(runs):
                before = admin.wait_for("fo", stable, 120)
                active = active_address(addresses)
                assert active is not None
                index = addresses.index(active)
                coordinators[index].send_signal(signal.SIGKILL)
                start = time.monotonic()
                coordinators[index].wait(10)
                others = AdminClient(",".join(a for a in addresses if a != active), timeout_s=1)
                after = others.wait_for("fo", stable, 60, poll_s=0.02)
                times.append(time.monotonic() - start)
                rebalances += after.generation != before.generation
                coordinators[index] = start_coordinator(tmp, f"c{index}-{run}", zk.hosts, ports[index], env)
                print(f"run {run + 1}: {times[-1]:.2f}s (generation {before.generation} -> {after.generation})",
                      flush=True)
        finally:
            for proc in workers + coordinators:
                proc.terminate()
            for proc in workers + coordinators:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(f"\nFailover: ZooKeeper session timeout {ZK_SESSION_S:.0f} s, worker session timeout 10 s, {runs} runs")
    print(f"{'median s':>10}{'max s':>8}{'target s':>10}{'rebalances':>12}")
    print(f"{statistics.median(times):>10.2f}{max(times):>8.2f}{ZK_SESSION_S + 2:>10.1f}{rebalances:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
