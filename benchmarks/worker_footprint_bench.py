"""What a worker client costs its service: CPU and memory of WorkerClient vs AsyncWorkerClient.

    python benchmarks/worker_footprint_bench.py [--window 30] [--sizes 1,100,1000] [--quick]

A coordinator runs in its own process. For each client (threaded, asyncio) and each size (1, 100
and 1,000 members in one process, one group, 100 tasks: at 1,000 most members hold no task), a fresh process starts the members, waits
until the group is Stable, then measures over ``--window`` seconds of Stable (heartbeat 3 s,
session 10 s): the process's CPU time (user + system, as a share of one core), its resident
memory and its threads. The baseline, in the same run, is a process that imported the same
modules and started no member: memory is also given above it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GROUP = "footprint"
TASKS = [f"t{i:03d}" for i in range(100)]


def _serve(queue: Any) -> None:
    import logging

    logging.disable(logging.WARNING)

    async def main() -> None:
        from groupcoord.coordinator.config import CoordinatorConfig
        from groupcoord.coordinator.rpc.server import start_server
        from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

        runtime = CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=2000))
        running = await start_server(runtime, "127.0.0.1:0")
        queue.put(f"127.0.0.1:{running.port}")
        await asyncio.Event().wait()

    asyncio.run(main())


def _config(address: str, i: int) -> Any:
    from groupcoord.worker import WorkerConfig

    return WorkerConfig(group_id=GROUP, coordinators=address, client_id=f"m{i:03d}", heartbeat_interval_ms=3000,
                        session_timeout_ms=10_000, rebalance_timeout_ms=60_000)


class _Quiet:
    def on_assigned(self, tasks: Any, generation: int) -> None: ...

    def on_revoked(self, tasks: Any) -> None: ...


def _usage() -> tuple[float, int]:
    import psutil

    process = psutil.Process()
    times = process.cpu_times()
    return times.user + times.system, process.memory_info().rss


def _stable(address: str, members: int) -> bool:
    from groupcoord.admin import AdminClient
    from groupcoord.v1 import groupcoord_pb2 as pb

    with AdminClient(address) as admin:
        group = admin.describe_group(GROUP)
    return group.state == pb.STABLE and len(group.members) == members and \
        sum(len(m.assigned) for m in group.members) == len(TASKS)


def child(kind: str, members: int, address: str, window: float) -> dict[str, Any]:
    """Run ``members`` clients of ``kind`` in this process; measure a Stable window."""
    import logging
    import threading

    import groupcoord.worker  # noqa: F401 - the same imports in every row, the baseline too
    from groupcoord.worker import AsyncWorkerClient, WorkerClient

    logging.disable(logging.WARNING)

    def measure() -> dict[str, Any]:
        cpu0, _ = _usage()
        started = time.monotonic()
        time.sleep(window)
        cpu1, rss = _usage()
        return {"cpu_s": cpu1 - cpu0, "wall_s": time.monotonic() - started, "rss": rss,
                "threads": threading.active_count()}

    def wait_stable(deadline_s: float = 180) -> None:
        deadline = time.monotonic() + deadline_s
        while not _stable(address, members):
            if time.monotonic() > deadline:
                raise SystemExit(f"{kind} x{members}: the group never became Stable")
            time.sleep(0.5)

    if kind == "baseline" or members == 0:
        return measure()
    if kind == "threaded":
        clients = [WorkerClient(_config(address, i), _Quiet()).start() for i in range(members)]
        try:
            wait_stable()
            return measure()
        finally:
            for client in clients:
                client.close()

    async def run() -> dict[str, Any]:
        clients = [AsyncWorkerClient(_config(address, i), _Quiet()) for i in range(members)]
        for client in clients:
            await client.start()
        try:
            await asyncio.to_thread(wait_stable)
            cpu0, _ = _usage()
            started = time.monotonic()
            await asyncio.sleep(window)  # the loop runs the heartbeats meanwhile
            cpu1, rss = _usage()
            return {"cpu_s": cpu1 - cpu0, "wall_s": time.monotonic() - started, "rss": rss,
                    "threads": threading.active_count()}
        finally:
            for client in clients:
                await client.close()

    return asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=30.0, help="seconds of Stable measured per row")
    parser.add_argument("--quick", action="store_true", help="a 10 s window")
    parser.add_argument("--sizes", default="1,100,1000", help="members per process, comma-separated")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "MEMBERS", "ADDRESS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    window = 10.0 if args.quick else args.window
    if args.child:
        kind, members, address = args.child
        print(json.dumps(child(kind, int(members), address, window)))
        return 0

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    address = queue.get(timeout=60)
    from groupcoord.admin import AdminClient

    with AdminClient(address) as admin:
        admin.put_tasks(GROUP, TASKS)
    rows: list[tuple[str, int, dict[str, Any]]] = []
    try:
        sizes = [int(n) for n in args.sizes.split(",") if n]
        for kind, members in [("baseline", 0)] + [(k, n) for n in sizes for k in ("threaded", "asyncio")]:
            env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            result = subprocess.run(
                [sys.executable, __file__, "--window", str(window), "--child", kind, str(members), address],
                check=True, capture_output=True, text=True, env=env, timeout=600)
            rows.append((kind, members, json.loads(result.stdout.strip().splitlines()[-1])))
            with AdminClient(address) as admin:  # the next row starts from an empty group
                deadline = time.monotonic() + 30
                while admin.describe_group(GROUP).members and time.monotonic() < deadline:
                    time.sleep(0.2)
    finally:
        server.terminate()

    base_rss = rows[0][2]["rss"]
    print(f"\nworker client footprint: {len(TASKS)} tasks, heartbeat 3 s, session 10 s, "
          f"{window:.0f} s of Stable per row, load average {os.getloadavg()[0]:.2f}")
    print(f"{'client':<10} {'members':>7} {'CPU % of a core':>16} {'CPU ms/member/hb':>17} {'RSS MiB':>8} "
          f"{'above base':>11} {'threads':>8}")
    for kind, members, r in rows:
        share = 100 * r["cpu_s"] / r["wall_s"]
        heartbeats = members * r["wall_s"] / 3.0
        per_hb = f"{1000 * r['cpu_s'] / heartbeats:.2f}" if members else "-"
        print(f"{kind:<10} {members:>7} {share:>16.2f} {per_hb:>17} {r['rss'] / 2**20:>8.1f} "
              f"{(r['rss'] - base_rss) / 2**20:>11.1f} {r['threads']:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
