"""A ZooKeeper client's CPU per request: kazoo's own threading handler against the coordinator's
``PollingHandler`` (``coordinator/ha/zk_polling.py``), on one real ZooKeeper, in one process.

    python benchmarks/zk_client_bench.py [--quick] [--rounds 3] [--reads 4000]

Why: every coordinator's elections, stores and watches go through one kazoo connection, and in the
election simulation (issue 37) kazoo's waits (an epoll selector built and closed per wait, three or
four waits per request) were most of the CPU its host processes spent. Each round runs the same
work on a fresh client of each kind, alternately: reads pipelined 100 at a time, reads one at a time,
and watch events (a data watch set, then fired by another client's write). The figure is this
process's CPU seconds over the work (the kernel's per-process clock), so the other processes on a
shared machine do not count; the ratio compares the two kinds within each round.
Target: the polling handler spends at most 0.8 x kazoo's own CPU per request (median of the rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler

from benchmarks.cpu_cap import process_cpu_s
from groupcoord.coordinator.ha.zk_polling import PollingHandler
from tests.zookeeper_server import ZooKeeperServer

NODES = 200
TARGET = 0.8
KINDS = {"kazoo's handler": SequentialThreadingHandler, "PollingHandler": PollingHandler}


def work(client: KazooClient, writer: KazooClient, reads: int) -> int:
    """The requests one client makes (returns how many): pipelined reads, single reads, fired watches."""
    for start in range(0, reads, 100):
        for answer in [client.get_async(f"/n{i % NODES}") for i in range(start, start + 100)]:
            answer.get(timeout=60)
    singles = reads // 4
    for i in range(singles):
        client.get(f"/n{i % NODES}")
    fired = 0
    for i in range(reads // 20):
        seen = client.handler.event_object()
        client.get(f"/n{i % NODES}", watch=lambda _event, seen=seen: seen.set())
        writer.set(f"/n{i % NODES}", b"y" * 50)
        if not seen.wait(60):
            raise RuntimeError("a watch did not fire within 60 s")
        fired += 2  # the read that set it and its event
    return reads + singles + fired


def measure(hosts: str, handler: Any, writer: KazooClient, reads: int) -> tuple[int, float]:
    client = KazooClient(hosts=hosts, handler=handler())
    client.start(timeout=30)
    try:
        before = process_cpu_s(os.getpid())
        requests = work(client, writer, reads)
        return requests, process_cpu_s(os.getpid()) - before
    finally:
        client.stop()
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=4000, help="pipelined reads per client per round")
    parser.add_argument("--quick", action="store_true", help="1 round of 1,000 reads")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.reads = 1, 1000
    if args.rounds < 1 or args.reads < 100:
        parser.error("--rounds must be at least 1 and --reads at least 100")
    zk = ZooKeeperServer()
    zk.start()
    try:
        writer = KazooClient(hosts=zk.hosts)
        writer.start(timeout=30)
        for i in range(NODES):
            writer.create(f"/n{i}", b"x" * 50)
        ratios, rows = [], []
        for round_ in range(args.rounds):
            per: dict[str, float] = {}
            for name, handler in (KINDS.items() if round_ % 2 == 0 else reversed(KINDS.items())):
                requests, cpu = measure(zk.hosts, handler, writer, args.reads)
                per[name] = cpu / requests
                rows.append((round_ + 1, name, requests, cpu))
            ratios.append(per["PollingHandler"] / per["kazoo's handler"])
        writer.stop()
        writer.close()
    finally:
        zk.close()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nzk_client_bench: {args.rounds} round(s), {args.reads} pipelined reads per client; load average {load}\n")
    print("| round | handler | requests | CPU s | us per request |")
    print("|---:|---|---:|---:|---:|")
    for round_, name, requests, cpu in rows:
        print(f"| {round_} | {name} | {requests} | {cpu:.3f} | {1e6 * cpu / requests:.0f} |")
    ratio = statistics.median(ratios)
    ok = ratio <= TARGET
    print(f"\nPollingHandler / kazoo's handler, CPU per request: {ratio:.2f} (median of {args.rounds}; "
          f"rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"{'PASS' if ok else 'MISS'}: at most {TARGET} x kazoo's own CPU per request")
    return 0 if ok else 1


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"({time.monotonic() - started:.0f}s)")
    sys.exit(code)
