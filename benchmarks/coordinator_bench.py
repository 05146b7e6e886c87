"""Coordinator benchmarks: heartbeat capacity and rebalance latency.

    python benchmarks/coordinator_bench.py [--quick]

Heartbeat capacity: 1,000 members of one Stable group heartbeat as fast as
the load generator can send (asyncio, many calls in flight) against (a) the
coordinator and (b) a no-op server with the same service and message types,
one after the other in the same run; the server runs in its own process, the
load generator in this one. Reported: requests/s, p99 latency, and the ratio.

Rebalance latency: N simulated members (asyncio, real gRPC, real protocol:
two-step join, sync, heartbeats every 50 ms; the leader runs the round-robin
assignor over 10·N tasks) form a Stable group; then one more member joins and
we time until every member holds the new generation's assignment.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

GROUP = "bench"


# ---------------------------------------------------------------- servers (child processes)


class NoopCoordinator(pb_grpc.GroupCoordinatorServicer):
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse()


def _serve(kind: str, members: int, port_queue: Any, store: str) -> None:
    async def main() -> None:
        if kind == "noop":
            server = grpc.aio.server()
            pb_grpc.add_GroupCoordinatorServicer_to_server(NoopCoordinator(), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            port_queue.put((port, [f"m{i}" for i in range(members)], 1))
            await server.wait_for_termination()
            return
        from groupcoord.coordinator.config import CoordinatorConfig
        from groupcoord.coordinator.rpc.server import start_server
        from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

        backing: Any = None
        if store == "sqlite":
            import tempfile

            from groupcoord.coordinator.storage.sqlite_store import SqliteStore

            backing = SqliteStore(Path(tempfile.mkdtemp(prefix="bench-")) / "groups.db")
        coordinator = CoordinatorRuntime(
            CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100), store=backing
        )
        ids = _form_group_in_model(coordinator, members) if members else []
        running = await start_server(coordinator, "127.0.0.1:0")
        generation = coordinator.groups[GROUP].generation if members else 0
        port_queue.put((running.port, ids, generation))
        await running.server.wait_for_termination()

    logging_off()
    asyncio.run(main())


def logging_off() -> None:
    import logging

    logging.disable(logging.WARNING)


def _call(runtime: Any, method: str, request: Any) -> list[Any]:
    """One request through the runtime before it serves (writes inline); the answer, once it comes."""
    box: list[Any] = []
    response_type = getattr(pb, type(request).__name__.replace("Request", "Response"))
    runtime.submit(lambda token: getattr(runtime.model, method)(request, token), response_type, box.append)
    return box


def _form_group_in_model(coordinator: Any, members: int) -> list[str]:
    """Put ``members`` members in a Stable group directly through the model (setup, not measured)."""
    replies: dict[str, Any] = {}
    ids: list[str] = []

    def join(member_id: str = "") -> Any:
        return _call(coordinator, "join", pb.JoinGroupRequest(
            group_id=GROUP, member_id=member_id, client_id="hb", session_timeout_ms=600_000,
            rebalance_timeout_ms=600_000, protocols=["round-robin"]))

    _call(coordinator, "put_tasks",
          pb.PutTasksRequest(group_id=GROUP, tasks=[pb.Task(task_id=f"t{i}") for i in range(members)]))
    for _ in range(members):
        first = join()[0]
        ids.append(first.member_id)
        replies[first.member_id] = join(first.member_id)
    for member_id in ids:  # everybody re-joins so one phase holds all of them
        if replies[member_id]:
            replies[member_id] = join(member_id)
    generation = coordinator.groups[GROUP].generation
    leader = coordinator.groups[GROUP].leader_id
    request = pb.SyncGroupRequest(group_id=GROUP, member_id=leader, generation=generation)
    for i, member_id in enumerate(ids):
        request.assignments.add(member_id=member_id, tasks=[pb.TaskReplica(task_id=f"t{i}")])
    _call(coordinator, "sync", request)
    assert coordinator.groups[GROUP].state.value == "Stable", coordinator.groups[GROUP].state
    return ids


def start_server_process(kind: str, members: int = 0, store: str = "memory") -> tuple[Any, int, list[str], int]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(kind, members, queue, store), daemon=True)
    proc.start()
    port, ids, generation = queue.get(timeout=120)
    return proc, port, ids, generation


# ---------------------------------------------------------------- heartbeat capacity


async def heartbeat_load(port: int, ids: list[str], generation: int, seconds: float, in_flight: int,
                         warmup: float = 1.0) -> tuple[float, float, int]:
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
    stubs = [pb_grpc.GroupCoordinatorStub(c) for c in channels]
    requests = [pb.HeartbeatRequest(group_id=GROUP, member_id=m, generation=generation) for m in ids]
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + warmup  # connections up, caches warm: not counted

    async def worker(index: int) -> None:
        nonlocal errors
        stub = stubs[index % len(stubs)]
        i = index
        while time.perf_counter() < deadline:
            request = requests[i % len(requests)]
            i += in_flight
            start = time.perf_counter()
            response = await stub.Heartbeat(request)
            latencies.append(time.perf_counter() - start)
            if response.error.code != pb.NONE:
                errors += 1

    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    latencies.clear()
    errors = 0
    deadline = time.perf_counter() + seconds
    await asyncio.gather(*(worker(i) for i in range(in_flight)))
    for channel in channels:
        await channel.close()
    latencies.sort()
    rate = len(latencies) / seconds
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else float("nan")
    return rate, p99 * 1000, errors


def bench_heartbeats(
    members: int, seconds: float, in_flight: int, stores: list[str], rounds: int = 3
) -> list[tuple[str, float, float, int]]:
    """Median req/s, median p99 and total errors per server, over ``rounds`` interleaved rounds.

    Servers take turns within each round (no-op, then each store), so a burst of load from a
    neighbour on a shared machine hits every server alike instead of one whole series."""
    servers = [("noop", "memory")] + [("coordinator", s) for s in stores]
    samples: dict[str, list[tuple[float, float, int]]] = {}
    for _ in range(rounds):
        for kind, store in servers:
            proc, port, ids, generation = start_server_process(kind, members, store)
            try:
                measured = asyncio.run(heartbeat_load(port, ids, generation, seconds, in_flight))
            finally:
                proc.terminate()
                proc.join(10)
            samples.setdefault(kind if kind == "noop" else f"coordinator ({store})", []).append(measured)
    return [
        (name, statistics.median(r for r, _, _ in runs), statistics.median(p for _, p, _ in runs),
         sum(e for _, _, e in runs))
        for name, runs in samples.items()
    ]


# ---------------------------------------------------------------- rebalance latency


class SimMember:
    """One member speaking the real protocol over asyncio gRPC."""

    def __init__(self, stub: pb_grpc.GroupCoordinatorStub, name: str, heartbeat_s: float) -> None:
        self.stub = stub
        self.name = name
        self.heartbeat_s = heartbeat_s
        self.member_id = ""
        self.generation = -1
        self.tasks: list[pb.TaskReplica] = []
        self.stable = asyncio.Event()
        self.stopped = False

    async def run(self) -> None:
        from groupcoord.assignors.registry import get_assignor
        from groupcoord.wire import context_from_join, sync_request_from_assignment

        while not self.stopped:
            self.stable.clear()
            request = pb.JoinGroupRequest(group_id=GROUP, member_id=self.member_id, client_id=self.name,
                                          session_timeout_ms=60_000, rebalance_timeout_ms=60_000,
                                          protocols=["round-robin"])
            join = await self.stub.JoinGroup(request)
            if join.error.code == pb.MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error.code != pb.NONE:
                continue
            self.generation = join.generation
            if join.leader_id == self.member_id:
                assignment = get_assignor(join.protocol).assign(context_from_join(GROUP, join))
                sync = sync_request_from_assignment(GROUP, self.member_id, join.generation, assignment)
            else:
                sync = pb.SyncGroupRequest(group_id=GROUP, member_id=self.member_id, generation=join.generation)
            result = await self.stub.SyncGroup(sync)
            if result.error.code != pb.NONE:
                continue
            self.tasks = list(result.tasks)
            self.stable.set()
            while not self.stopped:
                await asyncio.sleep(self.heartbeat_s)
                beat = await self.stub.Heartbeat(pb.HeartbeatRequest(
                    group_id=GROUP, member_id=self.member_id, generation=self.generation))
                if beat.error.code != pb.NONE:
                    break


async def rebalance_latency(port: int, members: int, heartbeat_s: float) -> tuple[float, float]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                        options=[("grpc.max_receive_message_length", 64 << 20)])
    admin = pb_grpc.GroupAdminStub(channel)
    await admin.PutTasks(pb.PutTasksRequest(group_id=GROUP, tasks=[pb.Task(task_id=f"t{i}") for i in range(10 * members)]))
    stub = pb_grpc.GroupCoordinatorStub(channel)
    sims = [SimMember(stub, f"m{i}", heartbeat_s) for i in range(members)]
    tasks = [asyncio.create_task(s.run()) for s in sims]
    start = time.perf_counter()
    while True:
        await asyncio.wait_for(asyncio.gather(*(s.stable.wait() for s in sims)), 300)
        if len({s.generation for s in sims}) == 1:
            break
        await asyncio.sleep(0.01)
    formed = time.perf_counter() - start
    newcomer = SimMember(stub, "new", heartbeat_s)
    old_generation = sims[0].generation
    start = time.perf_counter()
    tasks.append(asyncio.create_task(newcomer.run()))
    everyone = sims + [newcomer]
    while not all(s.stable.is_set() and s.generation > old_generation for s in everyone) or \
            len({s.generation for s in everyone}) != 1:
        await asyncio.sleep(0.002)
    latency = time.perf_counter() - start
    assert sum(len(s.tasks) for s in everyone) == 10 * members
    for s in everyone:
        s.stopped = True
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await channel.close()
    return formed, latency


def bench_rebalance(sizes: list[int], heartbeat_s: float, runs: int) -> list[tuple[int, float, float, float]]:
    rows = []
    for n in sizes:
        samples = []
        formed = 0.0
        for _ in range(runs):
            proc, port, _, _ = start_server_process("coordinator", 0)
            try:
                formed, latency = asyncio.run(rebalance_latency(port, n, heartbeat_s))
                samples.append(latency)
            finally:
                proc.terminate()
                proc.join(10)
        rows.append((n, formed, statistics.median(samples), max(samples)))
    return rows


def model_rebalance(members: int) -> float:
    """The coordinator's own share of a rebalance (no network): a Stable group of ``members``, one
    more joins, every member re-joins and syncs (the leader with a round-robin assignment)."""
    from groupcoord.assignors.registry import get_assignor
    from groupcoord.coordinator.testing import Harness
    from groupcoord.wire import context_from_join, sync_request_from_assignment

    h = Harness()
    h.check = lambda: None  # type: ignore[method-assign]  # measure the coordinator, not the test invariants
    h.put_tasks(GROUP, *[f"t{i}" for i in range(10 * members)])
    ids = [h.join_new(GROUP)[0] for _ in range(members)]
    pending = {m: h.join(GROUP, m) for m in ids}
    generation = h.group(GROUP).generation
    leader = h.group(GROUP).leader_id
    assignment = get_assignor("round-robin").assign(context_from_join(GROUP, pending[leader].response))
    _call(h.runtime, "sync", sync_request_from_assignment(GROUP, leader, generation, assignment))
    start = time.perf_counter()
    newcomer, held = h.join_new(GROUP)
    for m in ids:
        h.heartbeat(GROUP, m, generation)  # answered REBALANCE_IN_PROGRESS
        pending[m] = h.join(GROUP, m)
    join = next(p.response for p in [*pending.values(), held] if p.response.leader_id == p.response.member_id)
    assignment = get_assignor("round-robin").assign(context_from_join(GROUP, join))
    _call(h.runtime, "sync", sync_request_from_assignment(GROUP, join.member_id, join.generation, assignment))
    for m in [*ids, newcomer]:
        if m != join.member_id:
            h.sync(GROUP, m, join.generation)
    assert h.state(GROUP) == "Stable"
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--stores", default="memory,sqlite", help="coordinator stores to measure heartbeats with")
    args = parser.parse_args(argv)
    logging_off()
    members = 100 if args.quick else 1000
    seconds = 1.0 if args.quick else 5.0
    stores = [s for s in args.stores.split(",") if s]
    print(f"cpus: {os.cpu_count()}  python {sys.version.split()[0]}  grpcio {grpc.__version__}")
    print(f"\nHeartbeat capacity: {members} members, {seconds:.0f} s per server and round, 256 calls in flight")
    print(f"{'server':<24}{'req/s':>10}{'p99 ms':>10}{'errors':>8}{'ratio vs no-op':>16}")
    rows = bench_heartbeats(members, seconds, 256, stores, rounds=1 if args.quick else 5)
    base = rows[0][1]
    for name, rate, p99, errors in rows:
        print(f"{name:<24}{rate:>10.0f}{p99:>10.2f}{errors:>8}{rate / base:>16.2f}")
    by_name = {name: rate for name, rate, _, _ in rows}
    if "coordinator (memory)" in by_name and "coordinator (sqlite)" in by_name:
        print(f"sqlite / memory heartbeat capacity: {by_name['coordinator (sqlite)'] / by_name['coordinator (memory)']:.2f}"
              " (heartbeats write nothing; target >= 0.90)")
    print("medians of interleaved rounds" if not args.quick else "one round (--quick)")
    sizes = [10, 50] if args.quick else [10, 100, 1000]
    heartbeat_s = 0.05
    print(f"\nRebalance latency: one member joins a Stable group of N (heartbeat every {heartbeat_s * 1000:.0f} ms, "
          "initial delay 0, 10·N tasks, round-robin)")
    print(f"{'N':>6}{'form group s':>14}{'median s':>10}{'max s':>8}{'coordinator only s':>20}")
    for n, formed, median, worst in bench_rebalance(sizes, heartbeat_s, 1 if args.quick else 3):
        print(f"{n:>6}{formed:>14.2f}{median:>10.3f}{worst:>8.3f}{model_rebalance(n):>20.3f}")
    print("coordinator only: the same rebalance driven through the model in-process (no gRPC, invariants checked);"
          " the rest is transport and the members' own work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
