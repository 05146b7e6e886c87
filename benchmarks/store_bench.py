"""Save throughput and latency of the group stores for a typical group record.

The coordinator saves a group's whole record after each acknowledged change, on its event-loop
thread, so a save's latency is added to every JoinGroup/SyncGroup/LeaveGroup answer. This measures
``save`` for a record shaped like ``coordinator.model.records.group_to_record`` output with 100 members and
a 1,000-task assignment (about 100 KB of JSON), round-robin over a few groups.

    python benchmarks/store_bench.py            # 2,000 saves per store
    python benchmarks/store_bench.py --quick    # 100 saves: a smoke run
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.storage.store import GroupStore, MemoryStore


def typical_record(generation: int, members: int = 100, tasks: int = 1000) -> dict[str, Any]:
    """A record like ``group_to_record``'s: base64 protobuf blobs for metadata and tasks."""

    def blob(text: str) -> str:
        return base64.b64encode(text.encode()).decode("ascii")

    member_ids = [f"worker-{i:03d}-6f1c2a9e-3b7d-4e55-9a0c-{i:012d}" for i in range(members)]
    return {
        "version": 1,
        "group_id": "orders-etl",
        "state": "Stable",
        "generation": generation,
        "protocol": "sticky",
        "leader_id": member_ids[0],
        "members": [
            {
                "member_id": m,
                "client_id": f"etl-{i}",
                "instance_id": f"host-{i}",
                "host": f"10.0.{i // 250}.{i % 250}",
                "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 60_000,
                "protocols": ["sticky", "range"],
                "metadata": blob(f"pool=pool-{i % 4};capacity=16;rack=r{i % 8};owned=" + ",".join(
                    f"task-{t}" for t in range(i * 10, i * 10 + 10))),
            }
            for i, m in enumerate(member_ids)
        ],
        "assignment": {m: [[f"task-{t:04d}", 0] for t in range(i * tasks // members, (i + 1) * tasks // members)]
                       for i, m in enumerate(member_ids)},
        "unassigned": [],
        "tasks": [blob(f"task-{t:04d};pool=pool-{t % 4};replicas=1;weight={1 + t % 5}") for t in range(tasks)],
        "load_snapshot": blob("snapshot-2026-11-23T09:00:00Z"),
        "last_error": "",
    }


def measure(store: GroupStore, saves: int, groups: int = 8) -> tuple[float, float, float, float]:
    """(saves/s, p50 ms, p90 ms, p99 ms) over ``saves`` saves spread over ``groups`` groups.

    On a busy shared host the tail is mostly time spent waiting for a CPU: the load average is printed
    with the table so that a noisy run can be told from a slow store.
    """
    records = [typical_record(g) for g in range(groups)]
    for g, record in enumerate(records):  # warm up: every row exists, caches are hot
        store.save(f"group-{g}", record)
    latencies = []
    clock: Callable[[], float] = time.perf_counter
    start = clock()
    for i in range(saves):
        t0 = clock()
        store.save(f"group-{i % groups}", records[i % groups])
        latencies.append(clock() - t0)
    elapsed = clock() - start
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * q))] * 1e3

    return saves / elapsed, statistics.median(latencies) * 1e3, pct(0.90), pct(0.99)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 saves per store (smoke run)")
    parser.add_argument("--saves", type=int, default=2000)
    parser.add_argument("--dir", help="where the SQLite file goes (default: a temp dir; put it on the real disk)")
    args = parser.parse_args(argv)
    saves = 100 if args.quick else args.saves

    size = len(json.dumps(typical_record(1), separators=(",", ":")))
    print(f"record: 100 members, 1,000 tasks assigned, {size / 1024:.0f} KiB of JSON; {saves} saves per store")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        stores: list[tuple[str, Callable[[], GroupStore]]] = [
            ("MemoryStore", MemoryStore),
            ("SqliteStore synchronous=FULL", lambda: SqliteStore(os.path.join(tmp, "full.db"), synchronous="FULL")),
            ("SqliteStore synchronous=NORMAL", lambda: SqliteStore(os.path.join(tmp, "normal.db"),
                                                                   synchronous="NORMAL")),
        ]
        rows = []
        for name, make in stores:
            store = make()
            try:
                rows.append((name, *measure(store, saves)))
            finally:
                store.close()
    print(f"{'store':<32} {'saves/s':>10} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for name, rate, p50, p90, p99 in rows:
        print(f"{name:<32} {rate:>10,.0f} {p50:>8.3f} {p90:>8.3f} {p99:>8.3f}")
    print(f"host: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
