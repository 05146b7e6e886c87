"""Scale-out: heartbeat capacity with 1 and 2 sharded coordinator processes, shard move and failover times.

    python benchmarks/scale_bench.py [--quick] [--generator h2load|python] [--steps N,N,...]

A real ZooKeeper (Debian's package) and real ``groupcoord serve --sharded`` processes (64 shards).

1. Capacity: the most heartbeats a second (members at a 1 s heartbeat) answered at the rate asked,
   with a p99 under 100 ms and every answer OK. Measured in the same run for 1 and 2 no-op gRPC
   servers and for 1 and 2 coordinator processes, each step at a higher rate until one fails.
   - ``--generator h2load`` (the default): ``h2load`` (C, Debian's nghttp2-client; installed when
     missing and root) sends hand-made gRPC heartbeats at a fixed rate (``h2load_gen.py``), one
     h2load process per server, each repeating the heartbeat of one real member formed over the
     wire in a group that server leads. It costs a tenth of the server's CPU per heartbeat or less,
     so two servers on two cores can show twice one. The answers are checked by size (h2load cannot
     see grpc-status) and by a real client's heartbeat of each member in the middle of every step
     (NONE: no rebalance, generation unchanged).
   - ``--generator python``: ``--generators`` Python processes, every member a closed loop of real
     gRPC calls, 50 members a group formed over the wire. A Python client costs about what the
     server does per heartbeat, so on two cores the generators, not the servers, set the limit.
   Both report the generators' CPU (share of the machine, and per heartbeat) beside the servers'.
2. Shard move: 2 coordinators, one single-member group per shard probed every 10 ms at its leader;
   a third (and, full size, a fourth) coordinator joins and takes its share. Per moved shard: from
   the old leader's first NOT_COORDINATOR (it resigned) to the first answer from the new leader.
3. Failover: 3 coordinators; one is SIGKILLed. Per shard it led: from the kill to the first answer
   from the new leader (bounded below by the ZooKeeper session timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
import psutil
from cpu_cap import CpuCaps
from h2load_gen import CLIENTS, Target, ensure_h2load, run_step

from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.coordinator.ha.sharded import Cluster
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer, wait_until

SHARDS = 64  # full size; --quick: QUICK_SHARDS (fewer hand-overs before 2 coordinators are balanced)
QUICK_SHARDS = 12
MEMBERS_PER_GROUP = 50
SESSION_MS = 600_000  # members a step leaves idle stay members
ZK_SESSION_S = 4.0  # moves and failover: short, so failover is quick to measure, yet twice a loaded stall
CAPACITY_ZK_SESSION_S = 10.0  # the default: a pause over half of it drops every shard
Member = tuple[str, str, str, int]  # address, group, member id, generation


# ------------------------------------------------------------------ servers


class Noop(pb_grpc.GroupCoordinatorServicer):
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        return pb.HeartbeatResponse()


def _noop_server(queue: Any) -> None:
    async def main() -> None:
        server = grpc.aio.server()
        pb_grpc.add_GroupCoordinatorServicer_to_server(Noop(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        queue.put(port)
        await server.wait_for_termination()

    asyncio.run(main())


class Servers:
    """``n`` no-op servers or ``n`` sharded coordinators of ``shards`` shards, with the CPU their processes
    used. ``initial_delay_ms``: the coordinators' initial rebalance delay (long enough for a group's
    members to join in one generation)."""

    def __init__(self, kind: str, n: int, zk: ZooKeeperServer, workdir: Path, shards: int,
                 initial_delay_ms: int = 3000, caps: CpuCaps | None = None) -> None:
        self.kind = kind
        self.shards = shards
        self.pids: list[int] = []
        self._noops: list[Any] = []
        self._caps = caps
        self.cluster: Cluster | None = None
        if kind == "noop":
            ctx = mp.get_context("spawn")
            queue = ctx.Queue()
            for _ in range(n):
                proc = ctx.Process(target=_noop_server, args=(queue,), daemon=True)
                proc.start()
                self._noops.append(proc)
                self.pids.append(proc.pid)
            self.addresses = [f"127.0.0.1:{queue.get(timeout=60)}" for _ in range(n)]
            self._cap()
            return
        workdir.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(workdir, zk, f"/scale/{workdir.name}", shards=shards, zk_session_s=CAPACITY_ZK_SESSION_S,
                               coordinator_section=f"group_initial_rebalance_delay_ms = {initial_delay_ms}\n",
                               log_level="warning")
        self.addresses = [self.cluster.start() for _ in range(n)]
        self.cluster.wait_balanced(self.addresses, timeout=120)
        self.pids = [p.pid for p in self.cluster.procs]
        self._cap()

    def _cap(self) -> None:
        if self._caps is not None:
            for pid in self.pids:
                self._caps.cap(pid)

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def close(self) -> None:
        for proc in self._noops:
            proc.kill()
            proc.join(10)
        if self.cluster is not None:
            stop_processes(self.cluster.procs)
        if self._caps is not None:
            self._caps.close()


# ------------------------------------------------------------------ forming groups over the wire


async def _form_group(stubs: dict[str, Any], address: str, group: str, members: int) -> list[Member]:
    """``members`` members of ``group`` Stable at ``address`` in one generation (the coordinator's initial
    rebalance delay holds the first phase open while they all join)."""
    stub = stubs[address]
    join = pb.JoinGroupRequest(group_id=group, client_id="m", session_timeout_ms=SESSION_MS,
                               rebalance_timeout_ms=60_000, protocols=["round-robin"])
    firsts = await asyncio.gather(*(stub.JoinGroup(join, timeout=60) for _ in range(members)))
    ids = [f.member_id for f in firsts]
    if any(f.error.code != pb.MEMBER_ID_REQUIRED for f in firsts):
        raise RuntimeError(f"{group}: first join answered {[pb.ErrorCode.Name(f.error.code) for f in firsts][:3]}")

    def again(member_id: str) -> pb.JoinGroupRequest:
        request = pb.JoinGroupRequest()
        request.CopyFrom(join)
        request.member_id = member_id
        return request

    joined = await asyncio.gather(*(stub.JoinGroup(again(m), timeout=60) for m in ids))
    generations = {j.generation for j in joined}
    if any(j.error.code != pb.NONE for j in joined) or len(generations) != 1:
        raise RuntimeError(f"{group}: join answered {sorted({pb.ErrorCode.Name(j.error.code) for j in joined})}, "
                           f"generations {sorted(generations)}")
    generation = generations.pop()
    synced = await asyncio.gather(*(stub.SyncGroup(pb.SyncGroupRequest(
        group_id=group, member_id=m, generation=generation, protocol_name="round-robin"), timeout=60) for m in ids))
    if any(s.error.code != pb.NONE for s in synced):
        raise RuntimeError(f"{group}: sync answered {sorted({pb.ErrorCode.Name(s.error.code) for s in synced})}")
    return [(address, group, m, generation) for m in ids]


async def _leaders(bootstrap: str, groups: list[str]) -> dict[str, str]:
    async with grpc.aio.insecure_channel(bootstrap) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        where: dict[str, str] = {}
        for i in range(0, len(groups), 1000):
            answer = await stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=groups[i:i + 1000]), timeout=10)
            for found in answer.coordinators:
                if found.error.code != pb.NONE:
                    raise RuntimeError(f"FindCoordinator {found.group_id}: {pb.ErrorCode.Name(found.error.code)}")
                where[found.group_id] = found.address
    return where


def form(servers: Servers, members: int) -> list[Member]:
    """The members of every step, by group; a no-op server needs none formed (any id is answered NONE)."""
    groups = [f"g{i}" for i in range(-(-members // MEMBERS_PER_GROUP))]
    if servers.kind == "noop":
        n = len(servers.addresses)
        return [(servers.addresses[shard_of(g, servers.shards) % n], g, f"m{j}", 1)
                for g in groups for j in range(MEMBERS_PER_GROUP)][:members]

    async def main() -> list[Member]:
        channels = {a: grpc.aio.insecure_channel(a) for a in servers.addresses}
        stubs = {a: pb_grpc.GroupCoordinatorStub(c) for a, c in channels.items()}

        async def one(group: str) -> list[Member]:
            # a shard that moves meanwhile (e.g. its leader paused past half its ZooKeeper session on a
            # loaded machine) fails the formation: form a group of another name instead
            for attempt in range(5):
                name = group if attempt == 0 else f"{group}.{attempt}"
                try:
                    where = await _leaders(servers.addresses[0], [name])
                    return await _form_group(stubs, where[name], name, MEMBERS_PER_GROUP)
                except RuntimeError as failure:
                    print(f"  (forming {name} again: {failure})", flush=True)
            raise RuntimeError(f"could not form group {group}")

        out: list[Member] = []
        for i in range(0, len(groups), 10):
            for group_members in await asyncio.gather(*(one(g) for g in groups[i:i + 10])):
                out += group_members
        for channel in channels.values():
            await channel.close()
        return out[:members]

    return asyncio.run(main())


# ------------------------------------------------------------------ load


def _generate(members: list[Member], seconds: float, queue: Any) -> None:
    """One generator process: every member a closed loop, one heartbeat a second, to its group's leader."""
    async def main() -> tuple[list[float], dict[int, int], float]:
        addresses = sorted({m[0] for m in members})
        channels = {a: [grpc.aio.insecure_channel(a) for _ in range(4)] for a in addresses}
        stubs = {a: [pb_grpc.GroupCoordinatorStub(c) for c in cs] for a, cs in channels.items()}
        latencies: list[float] = []
        codes: dict[int, int] = {}
        end = time.monotonic() + seconds
        warm = time.monotonic() + 2.0  # connections up: not counted
        cpu_at_warm: list[float] = []

        async def member(index: int, address: str, group: str, member_id: str, generation: int) -> None:
            stub = stubs[address][index % 4]
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
                    code = -100 - failure.code().value[0]
                if sent >= warm:
                    latencies.append(time.monotonic() - sent)
                    codes[code] = codes.get(code, 0) + 1
                due = sent + 1.0

        async def mark_warm() -> None:
            await asyncio.sleep(max(0.0, warm - time.monotonic()))
            cpu_at_warm.append(time.process_time())

        await asyncio.gather(mark_warm(), *(member(i, *m) for i, m in enumerate(members)))
        cpu = time.process_time() - (cpu_at_warm[0] if cpu_at_warm else 0.0)
        for cs in channels.values():
            for channel in cs:
                await channel.close()
        return latencies, codes, cpu

    queue.put(asyncio.run(main()))


def load(servers: Servers, members: list[Member], seconds: float, generators: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    shuffled = members[:]
    random.Random(7).shuffle(shuffled)
    gens = [ctx.Process(target=_generate, args=(shuffled[i::generators], seconds, results), daemon=True)
            for i in range(generators)]
    for gen in gens:
        gen.start()
    time.sleep(2.0)  # the generators' warm-up (not measured), as they count it
    server_cpu = servers.cpu_seconds()
    latencies: list[float] = []
    codes: dict[int, int] = {}
    gen_cpu = 0.0
    for _ in gens:
        lat, got, cpu = results.get(timeout=seconds + 180)
        latencies += lat
        gen_cpu += cpu
        for code, n in got.items():
            codes[code] = codes.get(code, 0) + n
    server_cpu = servers.cpu_seconds() - server_cpu
    for gen in gens:
        gen.join(10)
    latencies.sort()
    measured = max(seconds - 2.0, 1.0)
    cores = os.cpu_count() or 1
    answered = len(latencies)
    return {"members": len(members), "rate": answered / measured,
            "cpu_us_per_hb": server_cpu / answered * 1e6 if answered else float("nan"),
            "gen_us_per_hb": gen_cpu / answered * 1e6 if answered else float("nan"),
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan"),
            "codes": codes, "gen_share": gen_cpu / (measured * cores), "server_share": server_cpu / (measured * cores)}


def capacity(kind: str, n: int, steps: list[int], seconds: float, generators: int, zk: ZooKeeperServer,
             workdir: Path, shards: int, caps: CpuCaps | None = None) -> tuple[int, list[dict[str, Any]]]:
    servers = Servers(kind, n, zk, workdir / f"{kind}{n}", shards, caps=caps)
    rows: list[dict[str, Any]] = []
    best = 0
    try:
        everyone = form(servers, steps[-1])
        for members in steps:
            row = load(servers, everyone[:members], seconds, generators)
            rows.append(row)
            ok = row["p99_ms"] < 100 and set(row["codes"]) <= {pb.NONE}
            print(f"  {kind} x{n:<3}{members:>7} members {row['rate']:>8.0f} hb/s  p99 {row['p99_ms']:>8.1f} ms  "
                  f"server CPU {row['server_share']:>4.0%} ({row['cpu_us_per_hb']:.0f} us/hb)  "
                  f"generators CPU {row['gen_share']:>4.0%}  "
                  f"{_codes(row['codes'])}", flush=True)
            if not ok:
                break
            best = members
    finally:
        servers.close()
    return best, rows


# ------------------------------------------------------------------ capacity with h2load


def h2load_targets(servers: Servers) -> list[tuple[Target, Member]]:
    """One real member per server, in a group that server leads (a no-op server answers any member),
    with the size of its OK answer as a real client sees it."""
    n = len(servers.addresses)
    if servers.kind == "noop":
        members: list[Member] = []
        for index, address in enumerate(servers.addresses):
            group = next(f"h{i}" for i in range(10_000) if shard_of(f"h{i}", servers.shards) % n == index)
            members.append((address, group, "m0", 1))
    else:
        async def main() -> list[Member]:
            where = await _leaders(servers.addresses[0], [f"h{i}" for i in range(400)])
            chosen = {a: next(g for g, at in where.items() if at == a) for a in servers.addresses}
            channels = {a: grpc.aio.insecure_channel(a) for a in servers.addresses}
            stubs = {a: pb_grpc.GroupCoordinatorStub(c) for a, c in channels.items()}
            formed = await asyncio.gather(*(_form_group(stubs, a, g, 1) for a, g in chosen.items()))
            for channel in channels.values():
                await channel.close()
            return [group[0] for group in formed]

        members = asyncio.run(main())
    targets = []
    for member in members:
        answer = _heartbeat(member)
        if answer.error.code != pb.NONE:
            raise RuntimeError(f"{member[1]}: heartbeat answered {pb.ErrorCode.Name(answer.error.code)}")
        request = pb.HeartbeatRequest(group_id=member[1], member_id=member[2], generation=member[3])
        targets.append((Target(member[0], request.SerializeToString(), 5 + answer.ByteSize()), member))
    return targets


def _heartbeat(member: Member) -> pb.HeartbeatResponse:
    """One heartbeat of ``member`` by a real client."""
    address, group, member_id, generation = member
    with grpc.insecure_channel(address) as channel:
        answer: pb.HeartbeatResponse = pb_grpc.GroupCoordinatorStub(channel).Heartbeat(
            pb.HeartbeatRequest(group_id=group, member_id=member_id, generation=generation), timeout=10)
    return answer


def _still_members(members: list[Member]) -> list[str]:
    """A real client's heartbeat of each member, in the middle of a step: anything but NONE means the
    member was dropped, its group rebalanced (a new generation) or its shard moved."""
    problems = []
    for member in members:
        try:
            code = _heartbeat(member).error.code
        except grpc.RpcError as failure:
            problems.append(f"{member[1]} at {member[0]}: real client's heartbeat failed ({failure.code().name})")
            continue
        if code != pb.NONE:
            problems.append(f"{member[1]} at {member[0]}: real client's heartbeat answered {pb.ErrorCode.Name(code)}")
    return problems


def capacity_h2load(kind: str, n: int, rates: list[int], seconds: float, warm: float, h2load: str,
                    zk: ZooKeeperServer, workdir: Path, shards: int,
                    caps: CpuCaps | None = None) -> tuple[int, int, float, list[dict[str, Any]]]:
    """Two ceilings over the ramp ``rates``: capacity, the highest rate answered as asked (within 5 %)
    with a p99 under 100 ms; throughput, the highest rate answered as asked whatever the p99 (on a
    shared machine the neighbours set the p99 long before the servers run out of CPU). Every answer
    must be OK for either. Also the servers' CPU at the throughput ceiling, as a share of the machine
    (what the neighbours left them)."""
    servers = Servers(kind, n, zk, workdir / f"{kind}{n}", shards, initial_delay_ms=0, caps=caps)  # groups of one member
    rows: list[dict[str, Any]] = []
    best = peak = 0
    peak_share = float("nan")
    cores = os.cpu_count() or 1
    try:
        pairs = h2load_targets(servers)
        targets, members = [t for t, _ in pairs], [m for _, m in pairs]
        for rate in rates:
            # while the p99 holds, a step that misses it (or the rate) runs once more before the capacity is
            # settled: one neighbour's burst should not decide it. An answer not OK ends the ramp at once.
            for _attempt in (1, 2) if best == peak else (1,):
                server_cpu = servers.cpu_seconds()
                step = run_step(h2load, targets, rate, seconds, warm, seconds / 2, lambda: _still_members(members))
                server_cpu = servers.cpu_seconds() - server_cpu
                answered = max(step.answered, 1)
                row = {"members": rate, "rate": step.rate, "p99_ms": step.p99_ms,
                       "cpu_us_per_hb": server_cpu / answered * 1e6,
                       "gen_us_per_hb": step.generator_cpu_s / answered * 1e6,
                       "gen_share": step.generator_cpu_s / (seconds * cores), "server_share": server_cpu / (seconds * cores)}
                rows.append(row)
                kept = step.rate >= 0.95 * rate and not step.problems
                ok = kept and step.p99_ms < 100
                print(f"  {kind} x{n:<3}{rate:>7} hb/s asked {step.rate:>8.0f} answered  p99 {step.p99_ms:>8.1f} ms  "
                      f"server CPU {row['server_share']:>4.0%} ({row['cpu_us_per_hb']:.0f} us/hb)  "
                      f"h2load CPU {row['gen_share']:>4.0%} ({row['gen_us_per_hb']:.0f} us/hb)  "
                      f"load {os.getloadavg()[0]:.1f}"
                      + ("" if not step.problems else "  " + "; ".join(step.problems[:3])), flush=True)
                if ok or step.problems:
                    break
            if not kept:
                break
            if ok and best == peak:
                best = rate
            peak, peak_share = rate, row["server_share"]
    finally:
        servers.close()
    return best, peak, peak_share, rows


def _codes(codes: dict[int, int]) -> str:
    def name(code: int) -> str:
        if code <= -100:
            return "grpc " + next(s.name for s in grpc.StatusCode if s.value[0] == -100 - code)
        return pb.ErrorCode.Name(code)

    return ", ".join(f"{name(c)} {n}" for c, n in sorted(codes.items()))


# ------------------------------------------------------------------ shard moves and failover


def probe_groups(shards: int) -> list[str]:
    """One group name per shard."""
    names: dict[int, str] = {}
    i = 0
    while len(names) < shards:
        names.setdefault(shard_of(f"p{i}", shards), f"p{i}")
        i += 1
    return [names[s] for s in range(shards)]


class Probes:
    """One single-member group per shard, heartbeating every 10 ms at its leader on a thread of its own
    event loop; records, per group, when its coordinator first refused it and when a new one answered."""

    def __init__(self, addresses: list[str], shards: int) -> None:
        self.shards = shards
        self.groups = probe_groups(shards)
        self.addresses = list(addresses)
        self.refused: dict[str, float] = {}  # group -> monotonic time of the first NOT_COORDINATOR / failure
        self.answered: dict[str, float] = {}  # group -> first NONE from a new address after that
        self.home: dict[str, str] = {}
        self.unexpected: list[str] = []  # answers a member should not get across a move (a rebalance)
        self.failure = ""
        self._stop = False
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._started = threading.Event()
        self._thread.start()
        if not self._started.wait(180) or self.failure:
            raise RuntimeError(self.failure or "probe groups not formed in 180 s")

    def reset(self) -> None:
        self.refused.clear()
        self.answered.clear()

    async def _run(self) -> None:
        channels: dict[str, Any] = {}

        def stub(address: str) -> Any:
            if address not in channels:
                channels[address] = pb_grpc.GroupCoordinatorStub(grpc.aio.insecure_channel(address))
            return channels[address]

        members: dict[str, tuple[str, int]] = {}
        where: dict[str, str] = {}
        try:
            for shard, first in enumerate(self.groups):
                # a shard whose leader drops it meanwhile (a stall on a loaded machine) fails the formation:
                # take another name of the same shard
                names = (n for n in (f"{first}.{i}" if i else first for i in range(1000))
                         if shard_of(n, self.shards) == shard)
                for attempt in range(5):
                    name = next(names)
                    try:
                        found = await _leaders(self.addresses[0], [name])
                        formed = await _form_group({found[name]: stub(found[name])}, found[name], name, 1)
                    except (RuntimeError, grpc.aio.AioRpcError):
                        if attempt == 4:
                            raise
                        continue
                    self.groups[shard] = name
                    members[name], where[name] = (formed[0][2], formed[0][3]), found[name]
                    break
        except (RuntimeError, grpc.aio.AioRpcError, KeyError) as failure:
            self.failure = f"probe groups not formed: {failure}"
            self._started.set()
            return
        self.home = dict(where)
        self._started.set()

        async def probe(group: str) -> None:
            member_id, generation = members[group]
            request = pb.HeartbeatRequest(group_id=group, member_id=member_id, generation=generation)
            address = where[group]
            while not self._stop:
                try:
                    answer = await stub(address).Heartbeat(request, timeout=1)
                    code = answer.error.code
                    hint = answer.error.coordinator_hint
                except grpc.aio.AioRpcError:
                    code, hint = -1, ""
                now = time.monotonic()
                if code == pb.NONE:
                    if group in self.refused and group not in self.answered and address != self.home[group]:
                        self.answered[group] = now
                        self.home[group] = address
                elif code in (pb.NOT_COORDINATOR, pb.COORDINATOR_LOAD_IN_PROGRESS, pb.COORDINATOR_NOT_AVAILABLE, -1):
                    if code != pb.COORDINATOR_LOAD_IN_PROGRESS:
                        self.refused.setdefault(group, now)
                        address = hint or await self._find(group, address)
                else:
                    self.unexpected.append(f"{group}: {pb.ErrorCode.Name(code)}")
                await asyncio.sleep(0.01)

        await asyncio.gather(*(probe(g) for g in self.groups))

    async def _find(self, group: str, current: str) -> str:
        for address in self.addresses:
            try:
                found = (await _leaders(address, [group]))[group]
                return found
            except (grpc.aio.AioRpcError, RuntimeError):
                continue
        return current

    def wait(self, groups: list[str], timeout: float) -> list[float]:
        wait_until(lambda: all(g in self.answered for g in groups), timeout, "every moved shard answered")
        return [self.answered[g] - self.refused[g] for g in groups]

    def close(self) -> None:
        self._stop = True
        self._thread.join(10)


def moves_and_failover(zk: ZooKeeperServer, workdir: Path, joins: int, shards: int) -> tuple[list[float], list[float]]:
    cluster = Cluster(workdir / "moves", zk, "/scale/moves", shards=shards, zk_session_s=ZK_SESSION_S,
                      coordinator_section="group_initial_rebalance_delay_ms = 0\n", log_level="warning")
    (workdir / "moves").mkdir(parents=True, exist_ok=True)
    live = [cluster.start(), cluster.start()]
    probes: Probes | None = None
    try:
        cluster.wait_balanced(live, timeout=120)
        probes = Probes(live, shards)
        move_times: list[float] = []
        for _ in range(joins):
            before = cluster.leaders(live[0])
            probes.reset()
            probes.addresses.append(cluster.start())
            live.append(probes.addresses[-1])
            after = cluster.wait_balanced(live, timeout=120)
            moved = [g for g in probes.groups if after[shard_of(g, shards)][0] != before[shard_of(g, shards)][0]]
            move_times += probes.wait(moved, 60)
        # failover: SIGKILL the first coordinator; per shard it led, kill -> first answer elsewhere
        victim = live[0]
        leaders = cluster.wait_balanced(live, timeout=120)
        led = [g for g in probes.groups if leaders[shard_of(g, shards)][0] == victim]
        probes.reset()
        killed = time.monotonic()
        cluster.proc_of(victim).kill()
        probes.addresses.remove(victim)
        wait_until(lambda: all(g in probes.answered for g in led), 60, "the killed coordinator's shards answered")
        failover = [probes.answered[g] - killed for g in led]
        if probes.unexpected:
            raise RuntimeError(f"probe members were told to re-join: {probes.unexpected[:5]}")
        return move_times, failover
    finally:
        if probes is not None:
            probes.close()
        stop_processes(cluster.procs)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else float("nan")


def _geometric(first: int, last: int, factor: float) -> list[int]:
    """Rates from ``first`` to ``last``, each ``factor`` times the one before, rounded to tens."""
    steps, rate = [], float(first)
    while rate <= last:
        steps.append(int(round(rate, -1)))
        rate *= factor
    return steps


def _cores(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of core counts: {text!r}") from None
    if not values or any(not 0 <= v <= (os.cpu_count() or 1) for v in values):
        raise argparse.ArgumentTypeError(f"each budget must be between 0 and {os.cpu_count()} cores: {text!r}")
    return values


def _steps(text: str) -> list[int]:
    try:
        steps = [int(s) for s in text.split(",")]
    except ValueError:
        steps = []
    if not steps or min(steps) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive whole numbers")
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--generator", choices=("h2load", "python"), default="h2load",
                        help="h2load (C, at a fixed rate) or Python gRPC clients (closed loops)")
    parser.add_argument("--generators", type=int, default=2, help="Python load generator processes")
    parser.add_argument("--steps", type=_steps, default=[], help="comma-separated heartbeats a second (= members at 1 hb/s)")
    parser.add_argument("--cap", type=_cores, default=None,
                        help="comma-separated CPU budgets per server process, in cores (a cgroup quota; 0: none). "
                             "Default 0.5,0: two servers at half a core each leave a core to the generators, so the "
                             "pair is compared fairly with one; then unbounded, as the machine allows (--quick: 0.5 only)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still end ZooKeeper and the servers
    h2load = ""
    if args.generator == "h2load":
        h2load = ensure_h2load() or ""
        if not h2load:
            print("scale_bench: h2load not found: install it with `sudo apt-get install nghttp2-client` "
                  "(or run with --generator python)", file=sys.stderr)
            return 2
    if args.steps:
        steps = args.steps
    elif h2load:
        # 10 % apart: the ratio of two capacities is read to within about a tenth
        steps = [500] if args.quick else _geometric(250, 16_000, 1.1)
    else:
        steps = [100, 200] if args.quick else [250, 500, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000]
    seconds = (2.0 if args.quick else 6.0) if h2load else (4.0 if args.quick else 10.0)
    warm = 0.5 if args.quick else 1.0
    shards = QUICK_SHARDS if args.quick else SHARDS
    load_avg = os.getloadavg()
    print(f"cpus: {os.cpu_count()}  load average: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}  "
          f"python {sys.version.split()[0]}  grpcio {grpc.__version__}")
    if h2load:
        version = subprocess.run([h2load, "--version"], check=False, capture_output=True, text=True).stdout.strip()
        print(f"{shards} shards; load from {version}: one process per server, {CLIENTS} connections each, a fixed "
              f"rate; {seconds:g} s per step ({warm:g} s warm-up)\n")
    else:
        print(f"{shards} shards; members heartbeat once a second, {MEMBERS_PER_GROUP} per group; "
              f"{args.generators} Python load generator processes; {seconds:g} s per step (2 s warm-up)\n")
    workdir = Path(tempfile.mkdtemp(prefix="groupcoord-scale-"))
    atexit.register(shutil.rmtree, workdir, True)  # coordinators' data and logs: gone at exit, even on SIGTERM
    budgets: list[tuple[float, CpuCaps | None]] = []
    for cores in args.cap if args.cap is not None else [0.5] if args.quick else [0.5, 0.0]:
        caps, why = CpuCaps.open(cores) if cores else (None, "")
        if cores and caps is None:
            print(f"no CPU budget of {cores:g} core per server: {why}; measured without one")
            continue
        budgets.append((cores, caps))
    with ZooKeeperServer() as zk:
        print("capacity (p99 < 100 ms, every answer OK); CPU as a share of all the machine's cores:")
        best: dict[tuple[float, str, int], int] = {}
        peak: dict[tuple[float, str, int], int] = {}  # h2load only: the rate kept whatever the p99
        peak_share: dict[tuple[float, str, int], float] = {}  # h2load only: the servers' CPU share at that rate
        shares: dict[tuple[float, str, int], float] = {}
        cost: dict[tuple[float, str, int], float] = {}
        gen_cost: dict[tuple[float, str, int], float] = {}
        for cores, caps in budgets:
            print(f" each server {'held to ' + format(cores, 'g') + ' core (a cgroup CPU quota)' if cores else 'unbounded'}:")
            for kind in ("noop", "coordinator"):
                for n in (1, 2):
                    key = (cores, kind, n)
                    if h2load:
                        best[key], peak[key], peak_share[key], rows = capacity_h2load(
                            kind, n, steps, seconds, warm, h2load, zk, workdir, shards, caps)
                    else:
                        best[key], rows = capacity(kind, n, steps, seconds, args.generators, zk, workdir, shards, caps)
                    shares[key] = max(r["gen_share"] for r in rows)
                    cost[key] = statistics.median(r["cpu_us_per_hb"] for r in rows)
                    gen_cost[key] = statistics.median(r["gen_us_per_hb"] for r in rows)
        move_times, failover = moves_and_failover(zk, workdir, 1 if args.quick else 2, shards)
    print(f"\n| CPU per server | servers | capacity, p99 < 100 ms (hb/s = members at 1 s) | x vs 1 process "
          f"| throughput, any p99 (hb/s) | x vs 1 process | server CPU there | {args.generator} CPU at most "
          "| server CPU per heartbeat (us) | generator CPU per heartbeat (us) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def ratio(figures: dict[tuple[float, str, int], int], cores: float, kind: str, n: int) -> float:
        return figures[cores, kind, n] / figures[cores, kind, 1] if figures.get((cores, kind, 1)) else float("nan")

    for cores, _caps in budgets:
        for kind in ("noop", "coordinator"):
            for n in (1, 2):
                key = (cores, kind, n)
                through = (f"{peak[key]} | {ratio(peak, cores, kind, n):.2f} | {peak_share[key]:.0%}" if peak
                           else "- | - | -")
                print(f"| {format(cores, 'g') + ' core' if cores else 'unbounded'} "
                      f"| {n} {'no-op server' if kind == 'noop' else 'coordinator'}{'s' if n > 1 else ''} "
                      f"| {best[key]} | {ratio(best, cores, kind, n):.2f} | {through} | {shares[key]:.0%} "
                      f"| {cost[key]:.0f} | {gen_cost[key]:.0f} |")
    for cores, _caps in budgets:
        two = ratio(best, cores, "coordinator", 2)
        print(f"\ntarget ({format(cores, 'g') + ' core per server' if cores else 'servers unbounded'}): "
              f"2 coordinator processes >= 1.8x one: {two:.2f}x -> {'met' if two >= 1.8 else 'NOT met'}"
              + (f" (throughput whatever the p99: {ratio(peak, cores, 'coordinator', 2):.2f}x; no-op servers "
                 f"{ratio(best, cores, 'noop', 2):.2f}x and {ratio(peak, cores, 'noop', 2):.2f}x)" if peak else ""))
    print(f"shard move (resign -> first answer from the new leader), {len(move_times)} moves: "
          f"p50 {pct(move_times, 0.5) * 1000:.0f} ms, p99 {pct(move_times, 0.99) * 1000:.0f} ms, "
          f"max {max(move_times, default=float('nan')) * 1000:.0f} ms")
    print(f"failover per shard (SIGKILL -> first answer from the new leader; ZooKeeper session {ZK_SESSION_S:g} s), "
          f"{len(failover)} shards: p50 {statistics.median(failover) if failover else float('nan'):.2f} s, "
          f"p99 {pct(failover, 0.99):.2f} s")
    load_avg = os.getloadavg()
    print(f"load average at the end: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
