"""Stalls: how long another group's heartbeat waits while the coordinator handles a maximal request.

    python benchmarks/stall_bench.py [--tasks 100000] [--rounds 2] [--quick]

The coordinator runs in its own process. A probe member of group "probe" heartbeats every 5 ms
from this process, first alone (the baseline), then while each request below is sent, in turn,
to group "big", at the largest size the default limits allow:

- PutTasks of ``max_tasks_per_request`` tasks (new, then the same again, then every weight changed);
- the leader's JoinGroup answer, which carries that whole catalog;
- the leader's SyncGroup assigning every replica;
- DescribeGroup of that group;
- ReportLoad with ``max_tasks_per_report`` task entries, ten times;
- PublishLoadSnapshot near ``max_snapshot_bytes``.

For each it prints the request's own time and the probe's heartbeat latency meanwhile (p50 and
worst), against the baseline in the same run. A request that held the event loop shows as a
worst heartbeat about as long as the request.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc

from groupcoord.channels import channel_options
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc


def _serve(queue: Any) -> None:
    import asyncio
    import logging

    logging.disable(logging.WARNING)

    from groupcoord.coordinator.process.process_tuning import tune_process

    tune_process()  # as ``groupcoord serve`` does

    async def main() -> None:
        from groupcoord.coordinator.config import CoordinatorConfig
        from groupcoord.coordinator.rpc.server import start_server
        from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

        runtime = CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        running = await start_server(runtime, "127.0.0.1:0")
        queue.put(running.port)
        await running.server.wait_for_termination()

    asyncio.run(main())


class Probe:
    """One member of group "probe", heartbeating every 5 ms on its own channel and thread."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.insecure_channel(address, options=channel_options())
        self._stub = pb_grpc.GroupCoordinatorStub(self._channel)
        join = pb.JoinGroupRequest(group_id="probe", client_id="probe", session_timeout_ms=30_000,
                                   rebalance_timeout_ms=30_000, protocols=["round-robin"])
        first = self._stub.JoinGroup(join, timeout=30)
        join.member_id = first.member_id
        joined = self._stub.JoinGroup(join, timeout=30)
        self._stub.SyncGroup(pb.SyncGroupRequest(group_id="probe", member_id=joined.member_id,
                                                 generation=joined.generation), timeout=30)
        self._heartbeat = pb.HeartbeatRequest(group_id="probe", member_id=joined.member_id,
                                              generation=joined.generation)
        self.samples: list[tuple[float, float]] = []  # (sent, latency s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            response = self._stub.Heartbeat(self._heartbeat, timeout=60)
            assert response.error.code == pb.NONE, response.error
            self.samples.append((sent, time.monotonic() - sent))
            self._stop.wait(0.005)

    def between(self, start: float, end: float) -> list[float]:
        return [latency for sent, latency in self.samples if start <= sent <= end or start <= sent + latency <= end]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._channel.close()


def _tasks(n: int, weight: float = 1.0) -> list[pb.Task]:
    return [pb.Task(task_id=f"task-{i:06d}", weight=weight) for i in range(n)]


def run(tasks: int, rounds: int) -> list[tuple[str, float, list[float]]]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(queue,), daemon=True)
    server.start()
    rows: list[tuple[str, float, list[float]]] = []
    try:
        address = f"127.0.0.1:{queue.get(timeout=60)}"
        channel = grpc.insecure_channel(address, options=channel_options())
        member = pb_grpc.GroupCoordinatorStub(channel)
        admin = pb_grpc.GroupAdminStub(channel)
        probe = Probe(address)

        def measure(name: str, call: Callable[..., Any], request: Any, times: int = 1) -> Any:
            start = time.monotonic()
            for _ in range(times):
                result = call(request, timeout=120)
            end = time.monotonic()
            time.sleep(0.05)  # the probe's heartbeat in flight at the end lands
            rows.append((name, end - start, probe.between(start, end)))
            return result

        start = time.monotonic()
        time.sleep(2.0)
        rows.append(("(baseline: nothing else)", time.monotonic() - start, probe.between(start, time.monotonic())))
        for round_ in range(rounds):
            group = f"big{round_}"
            # every request is built before its measurement: only the coordinator's time is measured
            put = pb.PutTasksRequest(group_id=group, tasks=_tasks(tasks))
            changed = pb.PutTasksRequest(group_id=group, tasks=_tasks(tasks, 2.0))
            measure(f"PutTasks {tasks:,} new", admin.PutTasks, put)
            measure(f"PutTasks {tasks:,} same again", admin.PutTasks, put)
            join = pb.JoinGroupRequest(group_id=group, client_id="leader", session_timeout_ms=60_000,
                                       rebalance_timeout_ms=60_000, protocols=["round-robin"])
            join.member_id = member.JoinGroup(join, timeout=60).member_id
            joined = measure(f"JoinGroup (leader, {tasks:,}-task catalog)", member.JoinGroup, join)
            assignment = pb.MemberAssignment(member_id=joined.member_id, tasks=[
                pb.TaskReplica(task_id=task.task_id, replica=0) for task in joined.tasks])
            sync = pb.SyncGroupRequest(group_id=group, member_id=joined.member_id, generation=joined.generation,
                                       assignments=[assignment])
            synced = measure(f"SyncGroup (leader, {len(assignment.tasks):,} replicas)", member.SyncGroup, sync)
            assert synced.error.code == pb.NONE, synced.error
            measure("DescribeGroup (that group)", admin.DescribeGroup, pb.DescribeGroupRequest(group_id=group))
            report = pb.ReportLoadRequest(group_id=group, member_id=joined.member_id, generation=joined.generation,
                                          report=pb.LoadReport(ts_ms=int(time.time() * 1000), tasks=[
                                              pb.TaskLoadReport(task_id=f"task-{i:06d}", msg_rate_in=1.0)
                                              for i in range(10_000)]))
            measure("ReportLoad 10,000 entries, x10", member.ReportLoad, report, times=10)
            snapshot = pb.LoadSnapshot(group_id=group, snapshot_id=f"s{round_}", created_ms=int(time.time() * 1000),
                                       tasks=[pb.TaskLoadStats(task_id=f"task-{i:06d}", worker_id="w" * 40,
                                                               short_samples=10, long_samples=100)
                                              for i in range(min(tasks, 150_000))])
            publish = pb.PublishLoadSnapshotRequest(snapshot=snapshot)
            published = measure(f"PublishLoadSnapshot {snapshot.ByteSize() / 1e6:.1f} MB", admin.PublishLoadSnapshot,
                                publish)
            assert published.error.code == pb.NONE, published.error
            measure(f"PutTasks {tasks:,} every weight changed", admin.PutTasks, changed)
        probe.close()
        channel.close()
    finally:
        server.kill()
        server.join(10)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000, help="catalog size (default: max_tasks_per_request)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="20,000 tasks, one round")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.rounds = 20_000, 1
    print(f"cpus: {os.cpu_count()}  load average: {os.getloadavg()[0]:.2f}  python {sys.version.split()[0]}")
    rows = run(args.tasks, args.rounds)
    baseline = rows[0][2]
    base_p50 = statistics.median(baseline) * 1000
    print(f"\nanother group's heartbeat while each request is handled (baseline p50 {base_p50:.1f} ms, "
          f"worst {max(baseline) * 1000:.1f} ms)\n")
    print(f"{'request':<44}{'request s':>10}{'hb p50 ms':>11}{'hb worst ms':>13}{'heartbeats':>12}")
    for name, seconds, latencies in rows[1:]:
        p50 = statistics.median(latencies) * 1000 if latencies else float("nan")
        worst = max(latencies) * 1000 if latencies else float("nan")
        print(f"{name:<44}{seconds:>10.2f}{p50:>11.1f}{worst:>13.1f}{len(latencies):>12}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
