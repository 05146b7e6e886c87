"""Soak: 1,000 members in 10 groups on one real coordinator process, with joins and leaves.

    python -m tests.chaos.soak --minutes 10          # `make chaos`
    python -m tests.chaos.soak --minutes 1           # what CI runs (tests/chaos/test_soak.py)

The coordinator is ``groupcoord serve`` on SQLite. The members are light: two load generator
processes of asyncio members, each a small but complete member (JoinGroup twice, SyncGroup, the
leader assigning the catalog round-robin, Heartbeat once a second, re-join on
REBALANCE_IN_PROGRESS). Churn: every ``churn_s`` one member of some group leaves (LeaveGroup) and
a new one joins, so every group rebalances now and then. The runner samples the coordinator's RSS.

Reports: the RSS curve, RSS growth after the warm-up (the rise of the least-squares line through
the samples after it, relative to its start), p99 heartbeat latency, and expiries of members that kept heartbeating
(UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION to a member that never left: must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GROUPS = 10
MEMBERS = 1000
TASKS_PER_GROUP = 20
SESSION_MS = 10_000
REBALANCE_MS = 30_000
HEARTBEAT_S = 1.0
GENERATORS = 2


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    spurious: list[str] = field(default_factory=list)
    joins: int = 0
    leaves: int = 0
    churned: int = 0  # members that left mid-run (a new one joined in their place)
    rebalances: int = 0
    errors: dict[str, int] = field(default_factory=dict)


async def _member(stub: Any, pb: Any, group: str, tally: Tally, stop: asyncio.Event, warm_until: float) -> None:
    """One member until ``stop`` is set (then it leaves)."""
    member_id = ""
    generation = -1
    try:
        while not stop.is_set():
            join = pb.JoinGroupRequest(group_id=group, member_id=member_id, client_id="soak",
                                       session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                                       protocols=["round-robin"])
            answer = await stub.JoinGroup(join, timeout=REBALANCE_MS / 1000 + 30)
            code = answer.error.code
            if code == pb.MEMBER_ID_REQUIRED:
                member_id = answer.member_id
                continue
            if code != pb.NONE:
                _trouble(pb, tally, "join", code, member_id, group)
                member_id = "" if code == pb.UNKNOWN_MEMBER_ID else member_id
                await asyncio.sleep(0.5 + random.random())
                continue
            member_id, generation = answer.member_id, answer.generation
            tally.joins += 1
            sync = pb.SyncGroupRequest(group_id=group, member_id=member_id, generation=generation)
            if answer.leader_id == member_id:
                ids = sorted(m.member_id for m in answer.members)
                tasks = sorted(t.task_id for t in answer.tasks)
                for i, mid in enumerate(ids):
                    mine = [pb.TaskReplica(task_id=t) for j, t in enumerate(tasks) if j % len(ids) == i]
                    sync.assignments.append(pb.MemberAssignment(member_id=mid, tasks=mine))
            synced = await stub.SyncGroup(sync, timeout=REBALANCE_MS / 1000 + 30)
            if synced.error.code != pb.NONE:
                if synced.error.code != pb.REBALANCE_IN_PROGRESS:
                    _trouble(pb, tally, "sync", synced.error.code, member_id, group)
                continue
            due = time.monotonic() + random.random() * HEARTBEAT_S
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, due - time.monotonic()))
                    break
                except TimeoutError:
                    pass
                sent = time.monotonic()
                beat = await stub.Heartbeat(pb.HeartbeatRequest(group_id=group, member_id=member_id,
                                                                generation=generation), timeout=30)
                if sent >= warm_until:
                    tally.latencies.append(time.monotonic() - sent)
                due = sent + HEARTBEAT_S
                if beat.error.code == pb.NONE:
                    continue
                if beat.error.code == pb.REBALANCE_IN_PROGRESS:
                    tally.rebalances += 1
                else:
                    _trouble(pb, tally, "heartbeat", beat.error.code, member_id, group)
                    if beat.error.code == pb.UNKNOWN_MEMBER_ID:
                        member_id = ""
                break
    finally:
        if member_id:
            await stub.LeaveGroup(pb.LeaveGroupRequest(group_id=group, member_id=member_id), timeout=10)
            tally.leaves += 1


def _trouble(pb: Any, tally: Tally, what: str, code: int, member_id: str, group: str) -> None:
    name = f"{what} {pb.ErrorCode.Name(code)}"
    tally.errors[name] = tally.errors.get(name, 0) + 1
    if code in (pb.UNKNOWN_MEMBER_ID, pb.ILLEGAL_GENERATION):
        tally.spurious.append(f"{group} {member_id}: {name}")


def _generate(address: str, groups: list[str], members: int, seconds: float, warm_s: float, churn_s: float,
              queue: Any) -> None:
    import grpc

    from groupcoord.v1 import groupcoord_pb2 as pb
    from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc

    async def main() -> Tally:
        channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
        stubs = [pb_grpc.GroupCoordinatorStub(c) for c in channels]
        tally = Tally()
        began = time.monotonic()
        warm_until = began + warm_s
        running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

        def spawn(i: int, group: str) -> None:
            stop = asyncio.Event()
            running.append((stop, asyncio.create_task(_member(stubs[i % 4], pb, group, tally, stop, warm_until))))

        for i in range(members):
            spawn(i, groups[i % len(groups)])
        n = members
        end = began + seconds
        while time.monotonic() < end:
            await asyncio.sleep(min(churn_s, max(0.0, end - time.monotonic())))
            if time.monotonic() >= end:
                break
            victim = random.randrange(len(running))  # one member leaves, a new one joins its group
            stop, task = running.pop(victim)
            stop.set()
            await task
            spawn(n, groups[n % len(groups)])
            n += 1
            tally.churned += 1
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
        for channel in channels:
            await channel.close()
        return tally

    queue.put(asyncio.run(main()))


def soak(minutes: float, *, members: int = MEMBERS, workdir: Path | None = None, sample_s: float | None = None,
         churn_s: float = 3.0, print_curve: bool = True) -> dict[str, Any]:
    """``members`` must stay well below what the coordinator answers on the CPU it gets: past that, the
    calls waiting in gRPC's queue grow with the backlog and RSS measures the backlog, not a leak."""
    from groupcoord.admin import AdminClient
    from tests.chaos.cluster import Coordinator, answers_as_active, wait_for

    workdir = workdir or Path(tempfile.mkdtemp(prefix="groupcoord-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    coordinator = Coordinator("soak-coordinator", workdir, '[server]\nstore = "sqlite"\n[coordinator]\n'
                                                          "group_initial_rebalance_delay_ms = 3000\n")
    seconds = minutes * 60
    warm_s = min(120.0, seconds / 3)
    sample_s = sample_s or min(5.0, seconds / 60)  # a short run samples more often: the medians need points
    coordinator.start()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    gens: list[Any] = []
    try:
        wait_for(lambda: answers_as_active(coordinator.address), 60, "the soak coordinator")
        groups = [f"soak{i}" for i in range(GROUPS)]
        with AdminClient(coordinator.address) as admin:
            for g in groups:
                admin.put_tasks(g, [f"{g}-t{i}" for i in range(TASKS_PER_GROUP)])
        gens = [ctx.Process(target=_generate, args=(coordinator.address, groups[i::GENERATORS], members // GENERATORS,
                                                    seconds, warm_s, churn_s * GENERATORS, queue), daemon=True)
                for i in range(GENERATORS)]
        for gen in gens:
            gen.start()
        began = time.monotonic()
        curve: list[tuple[float, int]] = []
        while time.monotonic() - began < seconds:
            curve.append((time.monotonic() - began, coordinator.rss()))
            time.sleep(sample_s)  # a sampling period, not an ordering
        tallies = [queue.get(timeout=300) for _ in gens]
        for gen in gens:
            gen.join(30)
    finally:
        for gen in gens:
            if gen.is_alive():
                gen.kill()
        coordinator.stop()
    latencies = sorted(x for t in tallies for x in t.latencies)
    growth = rss_growth([(at, rss) for at, rss in curve if at >= warm_s])
    errors: dict[str, int] = {}
    for t in tallies:
        for k, v in t.errors.items():
            errors[k] = errors.get(k, 0) + v
    result = {
        "minutes": minutes,
        "members": members,
        "curve": curve,
        "rss_growth": growth,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan"),
        "heartbeats": len(latencies),
        "spurious": [s for t in tallies for s in t.spurious],
        "joins": sum(t.joins for t in tallies),
        "leaves": sum(t.leaves for t in tallies),
        "churned": sum(t.churned for t in tallies),
        "rebalance_answers": sum(t.rebalances for t in tallies),
        "errors": errors,
        "warm_s": warm_s,
    }
    if print_curve:
        print(report(result))
    return result


def rss_growth(samples: list[tuple[float, int]]) -> float:
    """Growth over the window, relative to its start, of the least-squares line through the samples.
    The allocator makes RSS swing a few percent either way with each wave of rebalances; a leak is
    a trend, and a line through every sample finds it where two medians of a few samples each do not."""
    if len(samples) < 2:
        return 0.0
    fit = statistics.linear_regression([at for at, _ in samples], [float(rss) for _, rss in samples])
    start, end = samples[0][0], samples[-1][0]
    first = fit.intercept + fit.slope * start
    return (fit.slope * (end - start)) / first


def report(r: dict[str, Any]) -> str:
    curve = r["curve"]
    step = max(1, len(curve) // 12)
    points = ", ".join(f"{at:.0f}s {rss / 2**20:.1f}" for at, rss in curve[::step])
    load = os.getloadavg()
    return (f"soak: {r['members']} members in {GROUPS} groups for {r['minutes']:g} min (warm-up {r['warm_s']:.0f}s)\n"
            f"  RSS MiB: {points}, end {curve[-1][1] / 2**20:.1f}\n"
            f"  RSS growth after the warm-up: {r['rss_growth'] * 100:+.2f}% (limit 5%)\n"
            f"  heartbeats {r['heartbeats']}, p99 {r['p99_ms']:.1f} ms; member joins {r['joins']} "
            f"(incl. re-joins), churn {r['churned']} leaves + joins, REBALANCE_IN_PROGRESS answers {r['rebalance_answers']}\n"
            f"  expiries of members that kept heartbeating: {len(r['spurious'])}; other answers: {r['errors']}\n"
            f"  load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args(argv)
    result = soak(args.minutes)
    ok = result["rss_growth"] < 0.05 and not result["spurious"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
