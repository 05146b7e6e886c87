"""One member joins a consumer-protocol group over real gRPC: how soon it runs its tasks, streams vs unary calls.

    python benchmarks/consumer_stream_bench.py [--quick] [--sizes N,N] [--tasks T] [--generators G] [--cores C]

Issue 34's target, measured end to end (``protocol_bench.py`` measures the same change on a fake clock,
with no gRPC): a Stable consumer-protocol group of N members (1,000 and 10,000; 100,000 tasks) whose
members ``--generators`` processes speak for, on one Session stream each (``worker.aio_stream``, the
worker's own stream) or on unary calls; one member joins. Measured from the newcomer's first
GroupHeartbeat (its join) to the moment it runs its whole target, with the members that must give tasks up
really giving them up first: a simulated member releases what an answer no longer lists and says so in
a heartbeat at once, as the worker does; on a stream it heartbeats at once on ``assignment_changed`` and
``tasks_to_give_up`` news, else at the coordinator's interval (5 s; N/250 s past 1,250 members, so 10,000
members send 250 heartbeats a second). The coordinator process is held to ``--cores`` (half a core, as
``scale_bench.py`` holds its servers); each generator reports its idle share.

Rows per size: the newcomer running its whole target (s; the target: <= 0.5 s over streams, <= 2
heartbeat intervals unary), the coordinator's CPU meanwhile (s), the calls made meanwhile (every member
that makes one beyond its regular heartbeats is counted: members the change does not touch make none)
and the tasks moved. Unary runs up to ``UNARY_MAX`` members: past it the row would measure forming a
unary fleet of 10,000 at its 40 s interval.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from stream_bench import Calls, Generators, _counts, _cpu_now

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker.stream_tags import Nudge

GROUP = "consumers"
SESSION_MS = 600_000  # a member the generators are slow to serve stays a member
UNARY_MAX = 1_000
TARGETS = {"stream": "<= 0.5 s", "unary": "<= 2 intervals"}


def interval_ms(size: int) -> int:
    """The coordinator's heartbeat interval: its default 5 s, longer past 1,250 members (250 a second)."""
    return max(5_000, size * 4)


def _serve(out: Any, beat_ms: int) -> None:
    async def main() -> None:
        from groupcoord.coordinator.config import CoordinatorConfig
        from groupcoord.coordinator.rpc.server import start_server
        from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime

        config = CoordinatorConfig(consumer_heartbeat_interval_ms=beat_ms, consumer_session_timeout_ms=SESSION_MS)
        running = await start_server(CoordinatorRuntime(config), "127.0.0.1:0")
        out.put(f"127.0.0.1:{running.port}")
        await asyncio.Event().wait()

    asyncio.run(main())


class Coordinator:
    """The coordinator process, capped; its CPU seconds so far."""

    def __init__(self, caps: CpuCaps | None, beat_ms: int) -> None:
        ctx = mp.get_context("spawn")
        answers = ctx.Queue()
        self.proc = ctx.Process(target=_serve, args=(answers, beat_ms), daemon=True)
        self.proc.start()
        self.address: str = answers.get(timeout=300)
        if caps is not None:
            caps.cap(self.proc.pid or 0)

    def close(self) -> None:
        self.proc.kill()
        self.proc.join(10)


def put_catalog(address: str, tasks: int) -> None:
    with grpc.insecure_channel(address) as channel:
        admin = pb_grpc.GroupAdminStub(channel)
        for start in range(0, tasks, 10_000):
            chunk = [pb.Task(task_id=f"t{i}") for i in range(start, min(tasks, start + 10_000))]
            answer = admin.PutTasks(pb.PutTasksRequest(group_id=GROUP, tasks=chunk), timeout=120)
            if answer.error.code != pb.NONE:
                raise OSError(f"PutTasks: {answer.error.message}")


# ------------------------------------------------------------------ the simulated members (in a generator)


class Member:
    """A consumer member as the worker keeps it: epoch, what it runs, what the coordinator last heard."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.member_id = ""
        self.epoch = 0
        self.running: frozenset[tuple[str, int]] = frozenset()
        self.heard: frozenset[tuple[str, int]] | None = frozenset()
        self.told = asyncio.Event()
        self.changes: list[tuple[float, frozenset[tuple[str, int]]]] = []  # when it ran what (the newcomer's)
        self.news_at: list[float] = []  # when news came for it

    def hear(self, nudge: Nudge) -> None:
        del nudge  # every consumer news asks for the same: a heartbeat now
        self.news_at.append(time.monotonic())
        self.told.set()


class ConsumerFleet:
    """``count`` consumer members of one group in this generator, each heartbeating at the coordinator's
    interval, or at once on news, or at once after its tasks changed (what runs now, told)."""

    def __init__(self, calls: Calls, count: int, prefix: str) -> None:
        self.calls = calls
        self.members = [Member(f"{prefix}-{i}") for i in range(count)]
        self.interval_s = 5.0
        self.extra_calls = 0  # calls beyond each member's regular heartbeat
        self.regular_calls = 0
        self.callers: set[str] = set()
        self.tasks: list[asyncio.Task[None]] = []
        self.unanswered = 0  # calls beyond regular heartbeats sent and not yet answered
        self.extra_made = 0  # calls beyond regular heartbeats so far (never reset: a quiet group makes none)

    async def form(self) -> int:
        self.tasks = [asyncio.create_task(self._live(m, first=True)) for m in self.members]
        return len(self.members)

    async def _call(self, member: Member, request: pb.GroupHeartbeatRequest) -> pb.GroupHeartbeatResponse:
        if self.calls.mode == "unary":
            answer: pb.GroupHeartbeatResponse = await self.calls.stub.GroupHeartbeat(request, timeout=120)
            return answer
        _, waiting = await self.calls.stream.send("group_heartbeat", request, member.hear)
        streamed: Any = await asyncio.wait_for(waiting, 120)
        return streamed

    async def _join(self, member: Member) -> None:
        while True:
            request = pb.GroupHeartbeatRequest(group_id=GROUP, member_id=member.member_id, member_epoch=0,
                                               client_id=member.name, session_timeout_ms=SESSION_MS,
                                               rebalance_timeout_ms=SESSION_MS)
            try:
                answer = await self._call(member, request)
            except Exception:  # noqa: BLE001 - a broken stream, a deadline: joined again after a backoff
                await asyncio.sleep(0.1 + random.random() * 0.4)
                continue
            if answer.error.code == pb.NONE:
                member.member_id, member.epoch, member.heard = answer.member_id, answer.member_epoch, frozenset()
                self.interval_s = answer.heartbeat_interval_ms / 1000 or self.interval_s
                self._take(member, answer)
                return
            await asyncio.sleep(0.1 + random.random() * 0.4)

    async def _beat(self, member: Member) -> None:
        request = pb.GroupHeartbeatRequest(group_id=GROUP, member_id=member.member_id, member_epoch=member.epoch)
        sent = member.running
        if member.heard != sent:
            request.owned.SetInParent()
            request.owned.tasks.extend(pb.TaskReplica(task_id=t, replica=r) for t, r in sorted(sent))
        try:
            answer = await self._call(member, request)
        except Exception:  # noqa: BLE001 - a broken stream, a deadline: told again after a backoff, as the worker
            member.heard = None
            await asyncio.sleep(0.1 + random.random() * 0.4)
            return
        if answer.error.code in (pb.FENCED_MEMBER_EPOCH, pb.UNKNOWN_MEMBER_ID):
            self._run(member, frozenset())  # lost: stop everything, join again
            await self._join(member)
            return
        if answer.error.code != pb.NONE:
            member.heard = None
            await asyncio.sleep(0.1 + random.random() * 0.4)
            return
        member.heard, member.epoch = sent, answer.member_epoch
        self._take(member, answer)

    def _take(self, member: Member, answer: pb.GroupHeartbeatResponse) -> None:
        if answer.HasField("assignment"):  # released what left, started what came: the worker's listeners
            self._run(member, frozenset((t.task_id, t.replica) for t in answer.assignment.tasks))

    def _run(self, member: Member, tasks: frozenset[tuple[str, int]]) -> None:
        if tasks != member.running:
            member.running = tasks
            member.changes.append((time.monotonic(), tasks))

    async def _live(self, member: Member, first: bool = False) -> None:
        if first:
            await self._join(member)
        while True:
            try:
                await asyncio.wait_for(member.told.wait(), self.interval_s * (1 + random.random() * 0.01))
                extra = True
            except TimeoutError:
                extra = False
            member.told.clear()
            await self._counted(member, extra)
            while member.running != member.heard:  # gave tasks up or took some: say so at once
                await self._counted(member, True)

    async def _counted(self, member: Member, extra: bool) -> None:
        self._count(member, extra)
        self.unanswered += extra
        try:
            await self._beat(member)
        finally:
            self.unanswered -= extra

    def _count(self, member: Member, extra: bool) -> None:
        if extra:
            self.extra_calls += 1
            self.extra_made += 1
            self.callers.add(member.member_id)
        else:
            self.regular_calls += 1

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def state(self) -> tuple[int, int, int, int, int]:
        """(tasks run, fewest run by one member, members whose last change is not yet told, extra calls
        not yet answered, extra calls so far)."""
        counts = [len(m.running) for m in self.members]
        return (sum(counts), min(counts, default=0), sum(m.running != m.heard for m in self.members),
                self.unanswered, self.extra_made)

    def reset(self) -> None:
        self.extra_calls = self.regular_calls = 0
        self.callers.clear()

    async def newcomer_joins(self, address: str, coordinator_pid: int, share: int, name: str) -> dict[str, Any]:
        """One more member joins (the change measured): until it runs its whole target (DescribeGroup's)."""
        newcomer = Member(name)
        self.members.append(newcomer)
        cpu0, started = process_cpu_s(coordinator_pid), time.monotonic()
        self.callers.add(name)
        self.tasks.append(asyncio.create_task(self._live(newcomer, first=True)))
        async with grpc.aio.insecure_channel(address) as channel:
            admin = pb_grpc.GroupAdminStub(channel)
            while True:
                while len(newcomer.running) < share:
                    await asyncio.sleep(0.005)
                done_at, cpu = time.monotonic(), process_cpu_s(coordinator_pid)
                described = await admin.DescribeGroup(pb.DescribeGroupRequest(group_id=GROUP), timeout=120)
                mine = [m for m in described.members if m.member.member_id == newcomer.member_id]
                target = frozenset((t.task_id, t.replica) for t in mine[0].consumer.target) if mine else None
                if target and newcomer.running == target:
                    break
                await asyncio.sleep(0.05)
        ran = min(next(at for at, tasks in newcomer.changes if tasks == target), done_at)
        first_task = next((at for at, tasks in newcomer.changes if tasks), ran)
        news = newcomer.news_at or [ran]
        return {"ran_s": ran - started, "cpu_s": cpu, "cpu0": cpu0, "moved": len(target),
                "phases": (news[0] - started, first_task - started, len(newcomer.news_at))}


async def _quit(fleet: ConsumerFleet | None, calls: Calls) -> None:
    if fleet is not None:
        await fleet.stop()
    await calls.stream.close()


def _generator(conn: Any, address: str, mode: str) -> None:
    async def main() -> None:
        calls = Calls(address, mode)
        fleet: ConsumerFleet | None = None
        wall0 = cpu0 = 0.0
        while True:
            command, *args = await asyncio.to_thread(conn.recv)
            if command == "fleet":
                fleet = ConsumerFleet(calls, *args)
                conn.send(await fleet.form())
            elif command == "state":
                assert fleet is not None
                conn.send(fleet.state())
            elif command == "joined":
                assert fleet is not None
                conn.send(sum(bool(m.member_id) for m in fleet.members))
            elif command == "mark":
                assert fleet is not None
                fleet.reset()
                wall0, cpu0 = time.monotonic(), _cpu_now()
                conn.send("ok")
            elif command == "join":
                assert fleet is not None
                conn.send(await fleet.newcomer_joins(*args))
            elif command == "calls":
                assert fleet is not None
                idle = max(0.0, 1 - (_cpu_now() - cpu0) / max(1e-9, time.monotonic() - wall0))
                conn.send({"extra": fleet.extra_calls, "callers": len(fleet.callers), "idle": idle})
            else:
                with contextlib.suppress(TimeoutError):  # a stream of 10,000 members' calls may not end in time
                    await asyncio.wait_for(_quit(fleet, calls), 10)
                conn.send("bye")
                return

    asyncio.run(main())


class ConsumerGenerators(Generators):
    def __init__(self, n: int, address: str, mode: str) -> None:
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for _ in range(n):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_generator, args=(theirs, address, mode), daemon=True)
            proc.start()
            self.pipes.append(mine)
            self.procs.append(proc)


def _joined(generators: ConsumerGenerators, size: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while sum(generators.ask([("joined",)] * len(generators.pipes))) < size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group of {size:,} never formed")
        time.sleep(0.5)


def _stable(generators: ConsumerGenerators, tasks: int, size: int, timeout: float) -> None:
    """Every task run, each member its share, every change told, and the group quiet: no call beyond
    the regular heartbeats unanswered, nor made since the previous look half a second before; else
    TimeoutError. (Members told of news after their tasks settled still call: at 10,000 the catalog's
    last news kept the coordinator busy for seconds after every task ran, and without the quiet rule
    the first change measured that backlog.)"""
    deadline = time.monotonic() + timeout
    made = -1
    while time.monotonic() < deadline:
        states = generators.ask([("state",)] * len(generators.pipes))
        settled = sum(s[0] for s in states) == tasks and min(s[1] for s in states) >= tasks // size \
            and not any(s[2] for s in states)
        calls = sum(s[4] for s in states)
        if settled and not any(s[3] for s in states) and calls == made:
            return
        made = calls
        time.sleep(0.5)
    raise TimeoutError(f"the group of {size:,} never ran its {tasks:,} tasks")


def one_joins(mode: str, size: int, tasks: int, n_gen: int, caps: CpuCaps | None) -> dict[str, Any]:
    beat_ms = interval_ms(size)
    coordinator = Coordinator(caps, beat_ms)
    generators = ConsumerGenerators(n_gen, coordinator.address, mode)
    try:
        counts = [size // n_gen + (1 if g < size % n_gen else 0) for g in range(n_gen)]
        generators.ask([("fleet", counts[g], f"g{g}") for g in range(n_gen)])
        _joined(generators, size, timeout=300 + size / 20)
        print(f"  {mode:6} {size:6,d} members joined", flush=True)
        # the catalog once every member is in: one target over 100,000 tasks, not one per join (set-up)
        put_catalog(coordinator.address, tasks)
        _stable(generators, tasks, size, timeout=300 + size / 20)
        print(f"  {mode:6} {size:6,d} members run the {tasks:,} tasks", flush=True)
        rows = [_change(generators, coordinator, tasks, size, "newcomer")]
        # the next change, once the first settled: without what a group's first change pays once (each
        # member's view for the assignor rebuilt after its tasks changed while forming)
        _stable(generators, tasks, size + 1, timeout=120)
        rows.append(_change(generators, coordinator, tasks, size + 1, "second"))
    finally:
        try:
            generators.close()
        except (TimeoutError, OSError, EOFError) as failure:  # the run's own failure, if any, is the one to tell
            print(f"  closing the generators: {type(failure).__name__}: {failure}", flush=True)
        finally:
            coordinator.close()
    return {**rows[0], "mode": mode, "size": size, "interval_s": beat_ms / 1000, "next": rows[1]}


def _change(generators: ConsumerGenerators, coordinator: Coordinator, tasks: int, size: int,
            name: str) -> dict[str, Any]:
    """One member named ``name`` joins the Stable group of ``size``: the figures of that change."""
    n_gen = len(generators.pipes)
    generators.ask([("mark",)] * n_gen)
    joined = generators.ask([("join", coordinator.address, coordinator.proc.pid, tasks // (size + 1), name)]
                            + [("state",)] * (n_gen - 1), timeout=300)[0]
    calls = generators.ask([("calls",)] * n_gen)
    return {"ran_s": joined["ran_s"], "cpu_s": joined["cpu_s"] - joined["cpu0"], "moved": joined["moved"],
            "phases": joined["phases"], "calls": sum(c["extra"] for c in calls),
            "callers": sum(c["callers"] for c in calls), "gen_idle": min(c["idle"] for c in calls)}


def settled(mode: str, size: int, tasks: int, n_gen: int, caps: CpuCaps | None) -> dict[str, Any]:
    try:
        row = one_joins(mode, size, tasks, n_gen, caps)
    except (TimeoutError, EOFError) as failure:
        print(f"  {mode:6} {size:,}: {type(failure).__name__}: {failure}", flush=True)
        return {"mode": mode, "size": size, "failed": "never settled"}
    print(f"  {mode:6} {size:6,d} members: newcomer ran its {row['moved']} tasks in {row['ran_s']:.3f} s "
          f"(interval {row['interval_s']:g} s), coordinator CPU {row['cpu_s']:.3f} s, {row['calls']} extra calls "
          f"by {row['callers']} members; generators' idle {row['gen_idle']:.0%}", flush=True)
    for which, change in (("first", row), ("next", row["next"])):
        first_news, first_task, told = change["phases"]
        print(f"  {mode:6} {size:6,d} members, {which} change: newcomer ran its {change['moved']} tasks in "
              f"{change['ran_s']:.3f} s; its first news at {first_news:.3f} s ({told} in all), first task at "
              f"{first_task:.3f} s; coordinator CPU {change['cpu_s']:.3f} s", flush=True)
    return row


def _cell(row: dict[str, Any] | None, key: str, form: str = "{:.3f}") -> str:
    if row is None:
        return "not run"
    return str(row["failed"]) if "failed" in row else form.format(row[key])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a group of 60 over 600 tasks (a smoke run)")
    parser.add_argument("--sizes", type=_counts, help="group sizes, comma-separated")
    parser.add_argument("--tasks", type=lambda text: _counts(text)[0], help="tasks in the catalog")
    parser.add_argument("--generators", type=lambda text: _counts(text)[0], default=3, help="generator processes")
    parser.add_argument("--modes", default="unary,stream", help=argparse.SUPPRESS)
    parser.add_argument("--cores", type=float, default=0.5, help="the coordinator's CPU budget (0: none)")
    args = parser.parse_args()
    sizes = args.sizes or ([60] if args.quick else [1000, 10000])
    tasks = args.tasks or (600 if args.quick else 100_000)
    if args.cores < 0 or args.cores > (os.cpu_count() or 1):
        parser.error(f"--cores: between 0 (no budget) and {os.cpu_count()}, not {args.cores}")
    if tasks < max(sizes) + 1:
        parser.error(f"--tasks: at least one task per member ({max(sizes) + 1:,}), not {tasks:,}")
    caps, why = CpuCaps.open(args.cores) if args.cores else (None, "no budget asked")
    budget = f"{args.cores} core(s) (cgroup quota)" if caps else f"unbounded ({why})"
    print(f"consumer_stream_bench: coordinator held to {budget}; {args.generators} generator processes; "
          f"{tasks:,} tasks; load average {os.getloadavg()[0]:.1f}", flush=True)
    modes = args.modes.split(",")
    try:
        rows = [settled(mode, size, tasks, args.generators, caps) for size in sizes for mode in modes
                if mode == "stream" or size <= UNARY_MAX]
    finally:
        if caps is not None:
            caps.close()
    print("\n| one member joins (consumer protocol) | unary | stream | target |\n|---|---|---|---|")
    for size in sizes:
        by_mode = {r["mode"]: r for r in rows if r["size"] == size}
        unary, stream = by_mode.get("unary"), by_mode.get("stream")
        head = f"| {size:,} members:"
        print(f"{head} newcomer's first heartbeat to running its whole target (s) | {_cell(unary, 'ran_s')} "
              f"| {_cell(stream, 'ran_s')} | stream <= 0.5 s; unary <= 2 intervals ({2 * interval_ms(size) / 1000:g} s) |")
        print(f"{head} coordinator CPU meanwhile (s) | {_cell(unary, 'cpu_s')} | {_cell(stream, 'cpu_s')} "
              f"| the wall's floor: CPU / budget |")
        unary_next = unary.get("next", unary) if unary else None
        stream_next = stream.get("next", stream) if stream else None
        print(f"{head} the next change: running its whole target / coordinator CPU (s) "
              f"| {_cell(unary_next, 'ran_s')} / {_cell(unary_next, 'cpu_s')} "
              f"| {_cell(stream_next, 'ran_s')} / {_cell(stream_next, 'cpu_s')} | |")
        print(f"{head} calls beyond regular heartbeats / members making them | "
              f"{_cell(unary, 'calls', '{}')} / {_cell(unary, 'callers', '{}')} | "
              f"{_cell(stream, 'calls', '{}')} / {_cell(stream, 'callers', '{}')} | untouched members: none |")
    idle = min([r[k]["gen_idle"] if k else r["gen_idle"] for r in rows if "gen_idle" in r for k in ("", "next")],
               default=1.0)
    print(f"\ngenerators' least idle share: {idle:.0%}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (TimeoutError, OSError, mp.ProcessError, EOFError, queue.Empty, grpc.RpcError) as failure:
        print(f"consumer_stream_bench: stopped: {type(failure).__name__}: {failure or 'no answer in time'}",
              file=sys.stderr)
        sys.exit(1)
