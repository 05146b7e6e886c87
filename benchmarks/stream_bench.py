"""Unary calls vs the Session stream (issue 35): members one coordinator process holds, joins over streams.

    python benchmarks/stream_bench.py [--quick] [--steps N,N,...] [--generators G] [--cores C]

One coordinator process (a ``CoordinatorRuntime`` behind the real gRPC server) held to ``--cores`` of CPU
(a cgroup quota, as ``scale_bench.py`` holds its servers; unbounded where cgroups are not writable), and
``--generators`` Python processes that speak for the members, each reporting its own idle share so the
table shows they were never the limit. The worker's own stream (``worker.aio_stream.AioSessionStream``)
carries the stream side, so the client measured is the one shipped.

1. Capacity: members heartbeating once a second, each in a group of its own, at a p99 under 100 ms with
   every answer NONE; stepped up until a step fails, unary and stream in the same run. Ratio stream/unary.
2. Classic protocol, one member joining a group of N (1,000 and 10,000; --quick 100) over streams, end to
   end: from the newcomer's JoinGroup to the last SyncGroup answer of the N+1 (the coordinator pushes
   RebalanceStarted once the rebalance is stored; every member joins at once, as the shipped client does).
   Its phases: the first JoinGroup answer (every member joined), the leader's SyncGroup sent, every member
   synced, and the coordinator's CPU meanwhile (its budget makes the wall at least CPU / cores).
3. From a rebalance's start (the newcomer's JoinGroup) to every member's JoinGroup, unary (each member
   hears it at its next heartbeat: 1 s, or N/250 s past 250 members) vs stream (pushed). Unary runs up to
   ``UNARY_JOIN_MAX`` members.

Both clients batch on the stream (``SessionRequest.batch``, docs/stream.md): what waits together goes as one
gRPC message. ``--steps 250,500 --sizes 1000`` took 2 min 47 s on the 2-core VM at load 21-45; the full run
(``make bench``) adds the larger steps and the 10,000 join, whose forming fleet may not settle on a loaded
machine: its rows then say so (at most about 15 minutes), and the table is printed all the same.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import queue
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from cpu_cap import CpuCaps, process_cpu_s

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker.aio_stream import AioSessionStream
from groupcoord.worker.stream_tags import Nudge, NudgeKind

P99_LIMIT_MS = 100.0
SESSION_MS = 600_000  # members a step leaves idle stay members
REBALANCE_MS = 120_000
PENDING_IDS = 20_000  # member ids of the two-step join a group (and one address) may hold at once
UNARY_JOIN_MAX = 1_000
"""Largest group the unary join runs for: past it, members heartbeat every N/250 s (40 s at 10,000), so the
unary row would measure that interval while forming the unary fleet took minutes."""
CALL_TIMEOUT_S = REBALANCE_MS / 1000 + 60  # a JoinGroup is held up to the rebalance timeout: never give up first


# ------------------------------------------------------------------ the coordinator


def _serve(queue: Any, initial_delay_ms: int) -> None:
    async def main() -> None:
        from groupcoord.coordinator.config import CoordinatorConfig
        from groupcoord.coordinator.rpc.server import start_server
        from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

        # the fleet's members all join at once from one address: the anti-flood bound on member ids handed out
        # and not yet joined (200 per address) evicted ids faster than 10,000 could use them, and it never formed
        config = CoordinatorConfig(group_initial_rebalance_delay_ms=initial_delay_ms,
                                   group_max_session_timeout_ms=SESSION_MS, group_max_pending_members=PENDING_IDS,
                                   group_max_pending_members_per_principal=PENDING_IDS)
        running = await start_server(CoordinatorRuntime(config), "127.0.0.1:0")
        queue.put(f"127.0.0.1:{running.port}")
        await asyncio.Event().wait()

    asyncio.run(main())


class Coordinator:
    """The coordinator process, capped; its CPU seconds so far."""

    def __init__(self, caps: CpuCaps | None, initial_delay_ms: int = 0) -> None:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        self.proc = ctx.Process(target=_serve, args=(queue, initial_delay_ms), daemon=True)
        self.proc.start()
        self.address: str = queue.get(timeout=300)  # a loaded machine starts a process slowly
        if caps is not None:
            caps.cap(self.proc.pid or 0)

    def cpu(self) -> float:
        return process_cpu_s(self.proc.pid or 0)

    def close(self) -> None:
        self.proc.kill()
        self.proc.join(10)


# ------------------------------------------------------------------ one generator's calls


class Calls:
    """The member calls of one generator, unary (one channel) or on one Session stream."""

    def __init__(self, address: str, mode: str) -> None:
        self.mode = mode
        self.channel = grpc.aio.insecure_channel(address)
        self.stub: Any = pb_grpc.GroupCoordinatorStub(self.channel)
        self.news: dict[str, asyncio.Event] = {}  # member id -> set when a rebalance is pushed
        self.stream = AioSessionStream(("bench", address, mode), address, lambda _: self.channel)

    async def call(self, method: str, body: str, request: Any) -> Any:
        if self.mode == "unary":
            return await getattr(self.stub, method)(request, timeout=CALL_TIMEOUT_S)
        _, answer = await self.stream.send(body, request, self._hear(request.member_id))
        return await asyncio.wait_for(answer, CALL_TIMEOUT_S)

    def _hear(self, member_id: str) -> Any:
        def hear(nudge: Nudge) -> None:
            if nudge.kind is NudgeKind.JOIN and member_id in self.news:
                self.news[member_id].set()
        return hear

    async def join(self, group: str, member_id: str = "") -> pb.JoinGroupResponse:
        request = pb.JoinGroupRequest(
            group_id=group, member_id=member_id, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="bench", protocols=["round-robin"])
        answer: pb.JoinGroupResponse = await self.call("JoinGroup", "join_group", request)
        if answer.error.code == pb.MEMBER_ID_REQUIRED:
            request.member_id = answer.member_id
            answer = await self.call("JoinGroup", "join_group", request)
        return answer

    async def sync(self, group: str, joined: pb.JoinGroupResponse) -> pb.SyncGroupResponse:
        """The leader assigns nothing to everyone (the assignor is not what is measured)."""
        request = pb.SyncGroupRequest(group_id=group, member_id=joined.member_id, generation=joined.generation)
        if joined.leader_id == joined.member_id:
            request.assignments.extend(pb.MemberAssignment(member_id=m.member_id) for m in joined.members)
        answer: pb.SyncGroupResponse = await self.call("SyncGroup", "sync_group", request)
        return answer

    async def heartbeat(self, group: str, member_id: str, generation: int) -> pb.HeartbeatResponse:
        request = pb.HeartbeatRequest(group_id=group, member_id=member_id, generation=generation)
        answer: pb.HeartbeatResponse = await self.call("Heartbeat", "heartbeat", request)
        return answer


def _cpu_now() -> float:
    return time.process_time()


def _cpu_waited() -> float:
    """Seconds this process's main thread (its event loop) spent runnable but waiting for a CPU (Linux's
    schedstat; 0 elsewhere). An idle share alone hides a starved generator: niced on a loaded machine, the
    generators of one member joining 10,000 were 96% idle and waited for a CPU 25-40% of the time."""
    try:
        with open("/proc/self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


# ------------------------------------------------------------------ part 1: heartbeat capacity


async def _form_alone(calls: Calls, groups: list[str]) -> list[tuple[str, str, int]]:
    """One member per group, joined and synced: (group, member id, generation)."""
    async def one(group: str) -> tuple[str, str, int]:
        joined = await calls.join(group)
        await calls.sync(group, joined)
        return group, joined.member_id, joined.generation

    formed = []
    for start in range(0, len(groups), 200):
        formed += await asyncio.gather(*(one(g) for g in groups[start:start + 200]))
    return formed


async def _beat(calls: Calls, members: list[tuple[str, str, int]], seconds: float) -> dict[str, Any]:
    """Every member heartbeats once a second (phases spread) for ``seconds``; latencies and errors."""
    latencies: list[float] = []
    errors = 0
    pending: set[asyncio.Task[None]] = set()

    async def one(group: str, member: str, generation: int) -> None:
        nonlocal errors
        sent = time.monotonic()
        try:
            answer = await calls.heartbeat(group, member, generation)
            errors += answer.error.code != pb.NONE
        except Exception:  # noqa: BLE001 - counted: a failed heartbeat fails the step
            errors += 1
        latencies.append((time.monotonic() - sent) * 1000)

    start, wall0, cpu0, waited0 = time.monotonic(), time.monotonic(), _cpu_now(), _cpu_waited()
    phases = sorted((random.random(), m) for m in members)
    second = 0
    while time.monotonic() - start < seconds:
        for phase, member in phases:
            due = start + second + phase
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(*member))
            pending.add(task)
            task.add_done_callback(pending.discard)
        second += 1
    await asyncio.gather(*pending)
    wall, cpu = time.monotonic() - wall0, _cpu_now() - cpu0
    return {"latencies": latencies, "errors": errors, "idle": max(0.0, 1 - cpu / wall),
            "waited": (_cpu_waited() - waited0) / wall}


def _generator(conn: Any, address: str, mode: str) -> None:
    """A generator process: commands from the parent over ``conn``, answers back."""
    async def main() -> None:
        calls = Calls(address, mode)
        members: list[tuple[str, str, int]] = []
        fleet: Fleet | None = None
        while True:
            command, *args = await asyncio.to_thread(conn.recv)
            if command == "form":
                members += await _form_alone(calls, args[0])
                conn.send(len(members))
            elif command == "beat":
                conn.send(await _beat(calls, members, args[0]))
            elif command == "fleet":
                fleet = Fleet(calls, *args)
                conn.send(await fleet.form())
            elif command == "generation":
                assert fleet is not None
                conn.send((min(fleet.generation), max(fleet.generation)))
            elif command == "rebalance":
                assert fleet is not None
                conn.send(await fleet.rebalance(args[0]))
            else:
                await calls.stream.close()
                conn.send("bye")
                return

    asyncio.run(main())


class Generators:
    def __init__(self, n: int, address: str, mode: str, caps: CpuCaps | None = None) -> None:
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for _ in range(n):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_generator, args=(theirs, address, mode), daemon=True)
            proc.start()
            self.pipes.append(mine)
            self.procs.append(proc)

    def ask(self, commands: list[tuple[Any, ...]], timeout: float = 600) -> list[Any]:
        for pipe, command in zip(self.pipes, commands, strict=True):
            pipe.send(command)
        answers = []
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise TimeoutError("a generator did not answer")
            answers.append(pipe.recv())
        return answers

    def close(self) -> None:
        try:
            self.ask([("quit",)] * len(self.pipes), timeout=30)
        finally:
            for proc in self.procs:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()


def capacity(mode: str, steps: list[int], n_gen: int, seconds: float, caps: CpuCaps | None) -> list[dict[str, Any]]:
    """Step the members up until a step misses p99 < 100 ms or sees an error; one row per step."""
    coordinator = Coordinator(caps)
    generators = Generators(n_gen, coordinator.address, mode)
    rows: list[dict[str, Any]] = []
    try:
        formed = 0
        for members in steps:
            share = [[f"{mode}-{g}-{i}" for i in range(formed + g, members, n_gen)] for g in range(n_gen)]
            generators.ask([("form", groups) for groups in share])
            formed = members
            cpu0 = coordinator.cpu()
            results = generators.ask([("beat", seconds)] * n_gen, timeout=seconds * 10 + 120)
            latencies = sorted(x for r in results for x in r["latencies"])
            p99 = latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("inf")
            errors = sum(r["errors"] for r in results)
            server_cpu = coordinator.cpu() - cpu0
            row = {"mode": mode, "members": members, "p99": p99, "errors": errors,
                   "server_cores": server_cpu / seconds, "cpu_us": server_cpu / max(1, len(latencies)) * 1e6,
                   "gen_idle": min(r["idle"] for r in results), "gen_waited": max(r["waited"] for r in results),
                   "ok": p99 < P99_LIMIT_MS and errors == 0}
            rows.append(row)
            print(f"  {mode:6} {members:6d} members: p99 {p99:7.1f} ms, errors {errors}, server "
                  f"{row['server_cores']:.2f} cores, generators' least idle {row['gen_idle']:.0%}", flush=True)
            if not row["ok"]:
                break
    finally:
        generators.close()
        coordinator.close()
    return rows


# ------------------------------------------------------------------ parts 2 and 3: one group of N


class Fleet:
    """``count`` members of one classic group in this generator, each joined, synced and then heartbeating
    once a second; a pushed RebalanceStarted (stream) or REBALANCE_IN_PROGRESS (unary) makes it join again."""

    def __init__(self, calls: Calls, group: str, count: int, newcomer: bool, interval_s: float = 1.0) -> None:
        self.calls = calls
        self.interval_s = interval_s
        self.group = group
        self.count = count
        self.newcomer = newcomer
        self.generation = [0] * count
        self.member = [""] * count
        self.join_sent = [0.0] * count
        self.join_answered = [0.0] * count
        self.synced = [0.0] * count
        self.leader_sync_sent = 0.0
        self.tasks: list[asyncio.Task[None]] = []

    async def form(self) -> int:
        """Every member joined and synced once, each living (heartbeats, news) from its own first sync on: a
        member that sat idle until the whole fleet had synced held every later rebalance of the forming group
        up to its rebalance timeout (120 s), and 10,000 never settled."""
        self.tasks = [asyncio.create_task(self._join_then_live(i)) for i in range(self.count)]
        while min(self.synced) == 0.0:
            await asyncio.sleep(0.05)
        return self.count

    async def _join_then_live(self, i: int) -> None:
        await self._join(i)
        await self._live(i)

    async def _join(self, i: int) -> None:
        """Join and sync until synced, as the shipped member: again at once when the group moved on meanwhile
        (a SyncGroup answered REBALANCE_IN_PROGRESS: the forming group of 10,000 went through several
        generations, and a member that waited for its next heartbeat, 40 s away, held every rebalance up)."""
        while True:
            self.join_sent[i] = time.monotonic()
            if self.member[i]:
                self.calls.news.setdefault(self.member[i], asyncio.Event()).clear()
            joined = await self.calls.join(self.group, self.member[i])
            self.join_answered[i] = time.monotonic()
            self.member[i] = "" if joined.error.code == pb.UNKNOWN_MEMBER_ID else joined.member_id
            self.calls.news.setdefault(joined.member_id, asyncio.Event())
            failed = joined.error.code
            if failed == pb.NONE:
                if joined.leader_id == joined.member_id:
                    self.leader_sync_sent = time.monotonic()
                synced = await self.calls.sync(self.group, joined)
                failed = synced.error.code
                if failed == pb.NONE:
                    self.generation[i] = joined.generation
                    self.synced[i] = time.monotonic()
                    return
            if failed not in (pb.REBALANCE_IN_PROGRESS, pb.UNKNOWN_MEMBER_ID, pb.ILLEGAL_GENERATION):
                await asyncio.sleep(0.1 + random.random() * 0.4)  # anything else: a short backoff, then again

    async def _live(self, i: int) -> None:
        """As the shipped member: a heartbeat each interval, its answer deciding (REBALANCE_IN_PROGRESS:
        join), or a join at once when the stream tells of a rebalance."""
        while True:
            told = self.calls.news[self.member[i]]
            try:
                await asyncio.wait_for(told.wait(), self.interval_s * (1 + random.random() * 0.01))
                told.clear()
                await self._join(i)  # pushed once stored: the rebalance is real, join with no heartbeat first
                continue
            except TimeoutError:
                pass
            beat = await self.calls.heartbeat(self.group, self.member[i], self.generation[i])
            if beat.error.code == pb.UNKNOWN_MEMBER_ID:
                self.member[i] = ""  # forgotten: join as a new member
            if beat.error.code != pb.NONE:  # REBALANCE_IN_PROGRESS, or a generation it missed: join again
                await self._join(i)

    async def rebalance(self, after_generation: int) -> dict[str, Any]:
        """Wait until every member synced a generation after ``after_generation`` (the newcomer, if this
        generator holds it, joins first: its send is the rebalance's start)."""
        wall0, cpu0, waited0 = time.monotonic(), _cpu_now(), _cpu_waited()
        started = self.leader_sync_sent = 0.0
        if self.newcomer:
            started = time.monotonic()
            joined = await self.calls.join(self.group)
            if joined.leader_id == joined.member_id:
                self.leader_sync_sent = time.monotonic()
            await self.calls.sync(self.group, joined)
        while min(self.generation) <= after_generation:
            await asyncio.sleep(0.01)
        wall = time.monotonic() - wall0
        idle, waited = max(0.0, 1 - (_cpu_now() - cpu0) / wall), (_cpu_waited() - waited0) / wall
        return {"waited": waited, "started": started, "last_join": max(self.join_sent), "first_answer": min(self.join_answered),
                "leader_sync": self.leader_sync_sent, "last_sync": max(self.synced),
                "generation": min(self.generation), "idle": idle}


def heartbeat_interval_s(size: int) -> float:
    """The group's heartbeat interval: 1 s up to 250 members, then 250 heartbeats a second in all (a group of
    10,000 heartbeating every second would be 10,000 a second, more than half a core answers unary, and
    the group would never settle; workers of such a group would set a longer interval too)."""
    return max(1.0, size / 250)


def _settled(generators: Generators, timeout: float = 300) -> int:
    """The generation every member holds once they all hold the same one (forming may take several)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = generators.ask([("generation",)] * len(generators.pipes))
        if len({g for span in spans for g in span}) == 1:
            return int(spans[0][0])
        time.sleep(0.5)
    raise TimeoutError("the group never settled")


def one_joins(mode: str, size: int, n_gen: int, caps: CpuCaps | None) -> dict[str, Any]:
    """A group of ``size`` formed over ``mode``; one more member joins: how long until every JoinGroup was
    sent and every member synced again."""
    # a fleet of 10,000 forms in one generation only if no pause in its joins outlasts the initial delay
    coordinator = Coordinator(caps, initial_delay_ms=3000 if size <= 1000 else 10_000)
    generators = Generators(n_gen, coordinator.address, mode)
    try:
        counts = [size // n_gen + (1 if g < size % n_gen else 0) for g in range(n_gen)]
        interval_s = heartbeat_interval_s(size)
        generators.ask([("fleet", "fleet", counts[g], g == 0, interval_s) for g in range(n_gen)], timeout=600)
        generation = _settled(generators)
        cpu0 = coordinator.cpu()
        results = generators.ask([("rebalance", generation)] * n_gen, timeout=600)
        cpu_s = coordinator.cpu() - cpu0
    finally:
        try:
            generators.close()
        finally:
            coordinator.close()
    started = results[0]["started"]
    return {"mode": mode, "size": size, "interval_s": interval_s,
            "all_joined_s": max(r["last_join"] for r in results) - started,
            "first_answer_s": min(r["first_answer"] for r in results) - started,
            "leader_sync_s": max(r["leader_sync"] for r in results) - started,
            "all_synced_s": max(r["last_sync"] for r in results) - started, "cpu_s": cpu_s,
            "gen_idle": min(r["idle"] for r in results), "gen_waited": max(r["waited"] for r in results)}


# ------------------------------------------------------------------ main


def marginal_us(rows: list[dict[str, Any]]) -> float:
    """The coordinator's CPU per extra heartbeat between its first two steps (its timers and loop cost
    something at any rate: the first step alone would count that as heartbeats), or the first step's
    average when only one ran."""
    if len(rows) < 2 or rows[1]["members"] == rows[0]["members"]:
        return float(rows[0]["cpu_us"]) if rows else 0.0
    return float((rows[1]["server_cores"] - rows[0]["server_cores"]) / (rows[1]["members"] - rows[0]["members"]) * 1e6)


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive whole numbers (argparse turns the ValueError into one line)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positive whole numbers")
    return counts


def settled_join(mode: str, size: int, n_gen: int, caps: CpuCaps | None) -> dict[str, Any]:
    """``one_joins``, or a row saying the group never settled (the table is printed all the same: on a loaded
    machine a forming 10,000 can outlast every rebalance timeout)."""
    try:
        return one_joins(mode, size, n_gen, caps)
    except TimeoutError as failure:
        print(f"  {mode:6} join of {size:,}: {failure}", flush=True)
        return {"mode": mode, "size": size, "failed": "never settled"}


def _cell(row: dict[str, Any] | None, *keys: str) -> str:
    if row is None:
        return "not run"
    if "failed" in row:
        return str(row["failed"])
    return " / ".join(f"{row[key]:.2f}" for key in keys)


def _print_joins(joins: list[dict[str, Any]], sizes: list[int]) -> None:
    """The join rows of each size: unary vs stream, and the stream's phases."""
    for size in sizes:
        row = {j["mode"]: j for j in joins if j["size"] == size}
        unary, stream = row.get("unary"), row["stream"]
        target = {1000: "< 0.5 s", 10000: "< 5 s"}.get(size, "")
        head = f"| one member joins {size:,}:"
        print(f"{head} from the rebalance's start to every member's JoinGroup (s) | {_cell(unary, 'all_joined_s')} "
              f"| {_cell(stream, 'all_joined_s')} | pushed vs next heartbeat ({heartbeat_interval_s(size):.0f} s) |")
        print(f"{head} to the first JoinGroup answer / the leader's SyncGroup (s) "
              f"| {_cell(unary, 'first_answer_s', 'leader_sync_s')} | {_cell(stream, 'first_answer_s', 'leader_sync_s')} | |")
        print(f"{head} every member synced (s) | {_cell(unary, 'all_synced_s')} | {_cell(stream, 'all_synced_s')} "
              f"| stream {target} |")
        print(f"{head} coordinator CPU meanwhile (s) | {_cell(unary, 'cpu_s')} | {_cell(stream, 'cpu_s')} "
              f"| the wall's floor: CPU / budget |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small steps and groups (a smoke run)")
    parser.add_argument("--steps", type=_counts, help="members per capacity step, comma-separated")
    parser.add_argument("--sizes", type=_counts, help="group sizes of the join runs, comma-separated")
    parser.add_argument("--generators", type=lambda text: _counts(text)[0], default=3, help="generator processes")
    parser.add_argument("--modes", default="unary,stream", help=argparse.SUPPRESS)
    parser.add_argument("--cores", type=float, default=0.5, help="the coordinator's CPU budget (0: none)")
    args = parser.parse_args()
    steps = args.steps or ([100, 200] if args.quick else [500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 12000])
    sizes = args.sizes or ([100] if args.quick else [1000, 10000])
    if args.cores < 0 or args.cores > (os.cpu_count() or 1):
        parser.error(f"--cores: between 0 (no budget) and {os.cpu_count()}, not {args.cores}")
    seconds = 2.0 if args.quick else 5.0
    caps, why = CpuCaps.open(args.cores) if args.cores else (None, "no budget asked")
    budget = f"{args.cores} core(s) (cgroup quota)" if caps else f"unbounded ({why})"
    print(f"stream_bench: coordinator held to {budget}; {args.generators} generator processes; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    try:
        modes = args.modes.split(",")
        table = {mode: capacity(mode, steps, args.generators, seconds, caps) for mode in modes}
        joins = [settled_join(mode, size, args.generators, caps) for size in sizes for mode in modes
                 if mode == "stream" or size <= UNARY_JOIN_MAX]
    finally:
        if caps is not None:
            caps.close()
    held = {mode: max([r["members"] for r in rows if r["ok"]], default=0) for mode, rows in table.items()}
    if set(modes) != {"unary", "stream"}:
        print(held, joins)
        return 0
    ratio = held["stream"] / held["unary"] if held["unary"] else float("inf")
    print("\n| measure | unary | stream | target |\n|---|---|---|---|")
    print(f"| members held at p99 < 100 ms (1 hb/s) | {held['unary']} | {held['stream']} "
          f"| stream >= 3x unary: {'n/a (unary held none)' if not held['unary'] else f'{ratio:.1f}x'} |")
    extra = {mode: marginal_us(rows) for mode, rows in table.items()}
    print(f"| coordinator CPU per heartbeat, beyond its idle cost (µs) | {extra['unary']:.0f} | {extra['stream']:.0f} "
          f"| {extra['unary'] / max(1.0, extra['stream']):.1f}x less on the stream |")
    _print_joins(joins, sizes)
    idle = min([r["gen_idle"] for rows in table.values() for r in rows] + [j["gen_idle"] for j in joins if "gen_idle" in j])
    waited = max([r["gen_waited"] for rows in table.values() for r in rows]
                 + [j["gen_waited"] for j in joins if "gen_waited" in j])
    print(f"\ngenerators' least idle share: {idle:.0%}, most time waiting for a CPU: {waited:.0%}; "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (TimeoutError, OSError, mp.ProcessError, EOFError, queue.Empty) as failure:  # one line, no traceback
        print(f"stream_bench: stopped: {type(failure).__name__}: {failure or 'no answer in time'}", file=sys.stderr)
        sys.exit(1)
