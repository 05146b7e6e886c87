"""Load: members in many groups heartbeating once a second, up to and past capacity.

    python benchmarks/load_bench.py [--quick]

The server (a no-op gRPC server with the same service, or the coordinator with its groups
formed in-process before it serves) runs in its own process; the members run in two load
generator processes, each member a closed loop: send a heartbeat, wait for the answer, send
the next one a second after the previous one was sent (at once if the answer came later).

1. Capacity: the most members at which the heartbeat p99 stays under 100 ms, for the no-op
   server and the coordinator in the same run (their ratio is the coordinator's own cost).
2. Overload: the coordinator at twice its capacity for a while. A member is "expelled" when
   a heartbeat is answered UNKNOWN_MEMBER_ID; a "rebalance" is any REBALANCE_IN_PROGRESS or
   ILLEGAL_GENERATION answer. Both must be 0: an overloaded coordinator answers late, but it
   never expels a member for time it lost itself (``coordinator.runtime.lag``).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

MEMBERS_PER_GROUP = 50
SESSION_MS = 10_000
GENERATORS = 2


class Noop(pb_grpc.GroupCoordinatorServicer):
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse()


def _form(runtime: Any, group: str, members: int) -> list[str]:
    """``members`` members Stable in ``group``, through the runtime before it serves (setup)."""
    def call(method: str, request: Any) -> Any:
        box: list[Any] = []
        response_type = getattr(pb, type(request).__name__.replace("Request", "Response"))
        runtime.submit(lambda token: getattr(runtime.model, method)(request, token), response_type, box.append)
        return box

    join = pb.JoinGroupRequest(group_id=group, client_id="m", session_timeout_ms=SESSION_MS,
                               rebalance_timeout_ms=600_000, protocols=["round-robin"])
    ids = []
    held = []
    for _ in range(members):
        first = call("join", join)[0]
        again = pb.JoinGroupRequest()
        again.CopyFrom(join)
        again.member_id = first.member_id
        ids.append(first.member_id)
        held.append((again, call("join", again)))
    for again, box in held:
        if box:  # answered already (an earlier generation): join once more so one phase holds everyone
            call("join", again)
    group_state = runtime.groups[group]
    call("sync", pb.SyncGroupRequest(group_id=group, member_id=group_state.leader_id,
                                     generation=group_state.generation))
    return ids


def _serve(kind: str, members: int, queue: Any) -> None:
    import logging

    logging.disable(logging.WARNING)
    if kind != "noop":
        from groupcoord.coordinator.process.process_tuning import tune_process

        tune_process()  # as ``groupcoord serve`` does

    async def main() -> None:
        groups = {f"g{i}": [] for i in range(max(1, members // MEMBERS_PER_GROUP))}
        if kind == "noop":
            server = grpc.aio.server()
            pb_grpc.add_GroupCoordinatorServicer_to_server(Noop(), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            ids = [(g, f"m{i}", 1) for i, g in enumerate(sorted(groups) * MEMBERS_PER_GROUP)][:members]
            queue.put((port, ids))
            await server.wait_for_termination()
            return
        from groupcoord.coordinator.config import CoordinatorConfig
        from groupcoord.coordinator.rpc.server import start_server
        from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

        runtime = CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        ids = []
        for group in groups:
            per_group = min(MEMBERS_PER_GROUP, members - len(ids))
            generation = None
            for member in _form(runtime, group, per_group):
                generation = runtime.groups[group].generation
                ids.append((group, member, generation))
        running = await start_server(runtime, "127.0.0.1:0")
        queue.put((running.port, ids))
        await running.server.wait_for_termination()

    asyncio.run(main())


def _generate(port: int, members: list[tuple[str, str, int]], seconds: float, queue: Any) -> None:
    async def main() -> tuple[list[float], dict[int, int]]:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(4)]
        stubs = [pb_grpc.GroupCoordinatorStub(c) for c in channels]
        latencies: list[float] = []
        codes: dict[int, int] = {}
        end = time.monotonic() + seconds
        warm = time.monotonic() + 2.0  # connections up: not counted

        async def member(index: int, group: str, member_id: str, generation: int) -> None:
            stub = stubs[index % len(stubs)]
            request = pb.HeartbeatRequest(group_id=group, member_id=member_id, generation=generation)
            due = time.monotonic() + random.random()
            while True:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if time.monotonic() >= end:
                    return
                sent = time.monotonic()
                try:
                    response = await stub.Heartbeat(request, timeout=30)
                    code = response.error.code
                except grpc.aio.AioRpcError as failure:
                    code = -100 - failure.code().value[0]  # a transport failure, by gRPC status
                if sent >= warm:
                    latencies.append(time.monotonic() - sent)
                    codes[code] = codes.get(code, 0) + 1
                due = sent + 1.0

        await asyncio.gather(*(member(i, *m) for i, m in enumerate(members)))
        for channel in channels:
            await channel.close()
        return latencies, codes

    queue.put(asyncio.run(main()))


def run(kind: str, members: int, seconds: float) -> dict[str, Any]:
    """One server and its load; returns rate, p99 and the answers' codes."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(kind, members, queue), daemon=True)
    server.start()
    try:
        port, ids = queue.get(timeout=300)
        results = ctx.Queue()
        gens = [ctx.Process(target=_generate, args=(port, ids[i::GENERATORS], seconds, results), daemon=True)
                for i in range(GENERATORS)]
        for gen in gens:
            gen.start()
        latencies: list[float] = []
        codes: dict[int, int] = {}
        for _ in gens:
            lat, got = results.get(timeout=seconds + 120)
            latencies += lat
            for code, n in got.items():
                codes[code] = codes.get(code, 0) + n
        for gen in gens:
            gen.join(10)
    finally:
        server.kill()
        server.join(10)
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan")
    return {"members": members, "rate": len(latencies) / max(seconds - 2.0, 1.0), "p99_ms": p99, "codes": codes}


def capacity(kind: str, steps: list[int], seconds: float) -> tuple[int, list[dict[str, Any]]]:
    """The most members (of ``steps``) with p99 < 100 ms and every answer NONE."""
    best, rows = 0, []
    for members in steps:
        row = run(kind, members, seconds)
        rows.append(row)
        ok = row["p99_ms"] < 100 and set(row["codes"]) <= {pb.NONE}
        print(f"  {kind:<12}{members:>7} members  {row['rate']:>8.0f} hb/s  p99 {row['p99_ms']:>8.1f} ms  "
              f"{_codes(row['codes'])}", flush=True)
        if not ok:
            break
        best = members
    return best, rows


def _codes(codes: dict[int, int]) -> str:
    def name(code: int) -> str:
        if code <= -100:
            return "grpc " + next(s.name for s in grpc.StatusCode if s.value[0] == -100 - code)
        return pb.ErrorCode.Name(code)

    return ", ".join(f"{name(c)} {n}" for c, n in sorted(codes.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    steps = [500, 1000] if args.quick else [1000, 2000, 3000, 4000, 5000, 6000, 8000]
    seconds = 8.0 if args.quick else 15.0
    print(f"cpus: {os.cpu_count()}  load average: {os.getloadavg()[0]:.2f}  python {sys.version.split()[0]}  "
          f"grpcio {grpc.__version__}")
    print(f"members heartbeat once a second, {MEMBERS_PER_GROUP} per group, session {SESSION_MS / 1000:g} s; "
          f"{GENERATORS} load generator processes; {seconds:g} s per step\n")
    print("capacity (p99 < 100 ms, every answer NONE):")
    noop, _ = capacity("noop", steps, seconds)
    coordinator, _ = capacity("coordinator", steps, seconds)
    print(f"\ncapacity: no-op server {noop} members, coordinator {coordinator} members "
          f"(ratio {coordinator / noop if noop else float('nan'):.2f})")
    overload = 2 * max(coordinator, steps[0])
    hold = 20.0 if args.quick else 60.0
    print(f"\noverload: the coordinator at {overload} members (2x its capacity) for {hold:g} s")
    row = run("coordinator", overload, hold)
    codes = row["codes"]
    expelled = codes.get(pb.UNKNOWN_MEMBER_ID, 0)
    rebalances = codes.get(pb.REBALANCE_IN_PROGRESS, 0) + codes.get(pb.ILLEGAL_GENERATION, 0)
    print(f"  {row['rate']:.0f} hb/s answered, p99 {row['p99_ms']:.0f} ms, answers: "
          f"{_codes(codes)}")
    print(f"  expulsions of members that kept heartbeating: {expelled}; rebalance answers: {rebalances} "
          f"(target: 0 and 0) -> {'met' if expelled == rebalances == 0 else 'NOT met'}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
