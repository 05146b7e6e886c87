"""Classic vs consumer protocol: one member joining a Stable group, side by side in one run (issue 34).

    python benchmarks/protocol_bench.py [--quick] [--sizes 1000,10000] [--tasks 100000] [--consumer-only]

Both protocols are driven in this process through the coordinator's runtime, as
``coordinator_bench.py --parts model`` drives the classic one (no network: the coordinator's own
share; gRPC's floor per call is that benchmark's ``transport`` part), over a catalog of 100,000 tasks.

* **classic**: ``coordinator_bench.model_rebalance``: every member's heartbeat is answered
  REBALANCE_IN_PROGRESS, every member re-joins and syncs, the leader's assignment (round-robin) last.
* **consumer**: a Stable consumer-protocol group (sticky, the coordinator's default assignor); each
  member heartbeats every interval at its own phase, as a fleet does; at t=0 one member joins. The
  target is computed once (batched), then each member is walked toward it on its own heartbeats; a
  member that gives tasks up tells the coordinator at once (one extra call), the others only take
  the new epoch on the heartbeat they would have sent anyway. The simulation runs on a fake clock
  until the newcomer runs its whole target and no task is held by two members.

Reported per size: the coordinator's CPU for the change (consumer: each call's and timer poll's
``process_time()`` in the window, less the untouched members' heartbeats, those that changed
nothing or took the new epoch only, and the polls that fired no timer, each at its own CPU, plus
what taking the new epoch cost beyond a plain heartbeat, priced against plain probe heartbeats
interleaved in the same window; the newcomer's calls, the givers', the target's computation, the timers that fired, the records and
every collector pass count; the assignor's share apart; a note line per row shows the
subtraction), the calls the change made (consumer: beyond each member's regular heartbeats) and how many
members made one, and, consumer only, when the newcomer ran its tasks, in heartbeat intervals
after its first heartbeat. Targets at 10,000 (issue 34): CPU <= 0.1 s, newcomer <= 2 intervals.

A second table forms a consumer group of each size from nothing (``consumer_formation``): the
coordinator's CPU, every call, and the fake clock's time until every member runs its target.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from coordinator_bench import GROUP, _call, _load, logging_off, model_rebalance

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import consumer as consumer_model
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb

INTERVAL_S = 5.0  # the coordinator's default consumer_heartbeat_interval_ms
SESSION_MS = 600_000


@dataclass
class Sim:
    """One member as the simulation sees it: its epoch, what it runs, what the coordinator last heard."""

    member_id: str
    epoch: int
    running: frozenset[TaskReplica] = frozenset()
    heard: frozenset[TaskReplica] | None = frozenset()


@dataclass
class Window:
    calls: int = 0
    extra_calls: int = 0
    callers: set[str] = field(default_factory=set)  # members that made a call they would not have made
    regular: int = 0  # regular heartbeats in the window
    assignor_cpu: float = 0.0
    plain: list[float] = field(default_factory=list)  # each untouched heartbeat that changed nothing: its CPU
    epoch_only: list[float] = field(default_factory=list)  # each untouched one that took the new epoch only
    probes: list[float] = field(default_factory=list)  # plain heartbeats sent to price the epoch's (``_probe``)
    idle_polls: list[float] = field(default_factory=list)  # each poll of the timers that fired none: its CPU
    fired_polls: int = 0

    def taken_out(self) -> dict[str, float]:
        """What is not the change's, all measured in this window, the collector's passes left in: the
        probes, the untouched members' heartbeats and the idle polls, each at its own CPU; less what
        taking the new epoch cost beyond a plain heartbeat, which is the change's: the epoch-only
        heartbeats' median less the probes' (interleaved with them), times their count, never below 0."""
        epoch_median = statistics.median(self.epoch_only) if self.epoch_only else 0.0
        plain_median = statistics.median(self.probes) if self.probes else epoch_median
        untouched = sum(self.plain) + sum(self.epoch_only)
        taking = len(self.epoch_only) * max(0.0, epoch_median - plain_median)
        return {"untouched": untouched, "untouched_n": len(self.plain) + len(self.epoch_only),
                "epoch_only_n": len(self.epoch_only), "epoch_median": epoch_median, "plain_median": plain_median,
                "probes": sum(self.probes), "probes_n": len(self.probes), "taking": taking,
                "idle_polls": sum(self.idle_polls), "idle_polls_n": len(self.idle_polls),
                "total": sum(self.probes) + untouched + sum(self.idle_polls) - taking}


def _runtime() -> tuple[CoordinatorRuntime, FakeClock]:
    clock = FakeClock()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100,
                               group_max_size=1_000_000, consumer_heartbeat_interval_ms=int(INTERVAL_S * 1000),
                               consumer_assignment_interval_ms=100)
    return CoordinatorRuntime(config, clock=clock), clock


class Coordinator:
    """The CPU spent inside the coordinator's calls (its steps and timers), not the simulated members'
    (building requests, reading answers): what the table reports as the coordinator's. ``last`` is the
    last call's or poll's, ``last_collector`` the collector's share of it (``collector_timed``)."""

    cpu = 0.0
    last = 0.0
    last_collector = 0.0
    collector = 0.0  # the collector's CPU so far, while timed
    _collecting_since = 0.0

    @classmethod
    def call(cls, runtime: CoordinatorRuntime, method: str, request: Any) -> Any:
        began, collected = time.process_time(), cls.collector
        try:
            return _call(runtime, method, request)[0]
        finally:
            cls._count(began, collected)

    @classmethod
    def poll(cls, runtime: CoordinatorRuntime) -> int:
        began, collected = time.process_time(), cls.collector
        try:
            return runtime.poll_timers()
        finally:
            cls._count(began, collected)

    @classmethod
    def _count(cls, began: float, collected: float) -> None:
        cls.last = time.process_time() - began
        cls.last_collector = cls.collector - collected
        cls.cpu += cls.last

    @classmethod
    def _on_collector(cls, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            cls._collecting_since = time.process_time()
        else:
            cls.collector += time.process_time() - cls._collecting_since

    @classmethod
    @contextmanager
    def collector_timed(cls) -> Iterator[None]:
        """The collector's passes timed (``gc.callbacks``), so that none is taken out with a call."""
        gc.callbacks.append(cls._on_collector)
        try:
            yield
        finally:
            gc.callbacks.remove(cls._on_collector)


def _beat(runtime: CoordinatorRuntime, member: Sim) -> pb.GroupHeartbeatResponse:
    request = pb.GroupHeartbeatRequest(group_id=GROUP, member_id=member.member_id, member_epoch=member.epoch)
    if member.heard != member.running:
        request.owned.SetInParent()
        request.owned.tasks.extend(pb.TaskReplica(task_id=t.task_id, replica=t.replica)
                                   for t in sorted(member.running))  # sorted, as the worker lists them
    sent = member.running
    answer: pb.GroupHeartbeatResponse = Coordinator.call(runtime, "group_heartbeat", request)
    assert answer.error.code == pb.NONE, answer.error.message
    member.heard = sent
    member.epoch = answer.member_epoch
    if answer.HasField("assignment"):  # the client: revoke what left, start what came (worker.consumer_member)
        member.running = frozenset(TaskReplica(t.task_id, t.replica) for t in answer.assignment.tasks)
    return answer


def _join(runtime: CoordinatorRuntime, name: str) -> Sim:
    request = pb.GroupHeartbeatRequest(group_id=GROUP, member_epoch=0, client_id=name, session_timeout_ms=SESSION_MS,
                                       rebalance_timeout_ms=SESSION_MS)
    answer: pb.GroupHeartbeatResponse = Coordinator.call(runtime, "group_heartbeat", request)
    assert answer.error.code == pb.NONE, answer.error.message
    return Sim(answer.member_id, answer.member_epoch,
               frozenset(TaskReplica(t.task_id, t.replica) for t in answer.assignment.tasks))


def _stable_group(members: int, tasks: int) -> tuple[CoordinatorRuntime, FakeClock, list[Sim]]:
    """A Stable consumer group, formed through the runtime (set-up, not measured)."""
    runtime, clock = _runtime()
    _call(runtime, "put_tasks", pb.PutTasksRequest(group_id=GROUP, tasks=[pb.Task(task_id=f"t{i}")
                                                                           for i in range(tasks)]))
    sims = [_join(runtime, f"m{i}") for i in range(members)]
    for _ in range(3):  # the target, then each member takes it and says so
        clock.advance(0.2)
        runtime.poll_timers()
        for sim in sims:
            _beat(runtime, sim)
    held = sum(len(s.running) for s in sims)
    assert held == tasks, f"{held} of {tasks} tasks running after the set-up"
    return runtime, clock, sims



def consumer_change(members: int, tasks: int, seed: int = 7) -> dict[str, Any]:
    """One member joins a Stable group of ``members``: simulate heartbeats on the fake clock until the
    newcomer runs its whole target; the coordinator's CPU and the calls, as the module says. Then a
    second member joins the same group, settled again: the next change's figures (``next``), without
    the costs a group's first change pays once (each member's view for the assignor, rebuilt once its
    tasks changed; the catalog's check for an incremental target, once per catalog version)."""
    runtime, clock, sims = _stable_group(members, tasks)
    rng = random.Random(seed)
    with Coordinator.collector_timed():
        first = _one_joins(runtime, clock, sims, rng, "newcomer")
        second = _one_joins(runtime, clock, sims, rng, "second")
    return {**first, "next": second}


def _one_joins(runtime: CoordinatorRuntime, clock: FakeClock, sims: list[Sim], rng: random.Random,
               name: str) -> dict[str, Any]:
    """One member joins; every member heartbeats at its own phase until the newcomer runs its target.
    Each call's CPU is timed; the change's is the window's less what ``Window.taken_out`` says."""
    model = runtime.model
    start = clock.now()
    queue = [(start + rng.uniform(0, INTERVAL_S), i) for i in range(len(sims))]  # each member's phase
    heapq.heapify(queue)
    window = Window()
    timed = consumer_model.target_for

    def compute(inputs: Any, ids: Any) -> Any:
        began = time.process_time()
        try:
            return timed(inputs, ids)
        finally:
            window.assignor_cpu += time.process_time() - began

    consumer_model.target_for = compute  # type: ignore[assignment]  # the assignor's share, apart
    gc.collect()
    cpu_start, collector_start = Coordinator.cpu, Coordinator.collector
    newcomer = _join(runtime, name)
    window.calls += 1
    window.extra_calls += 1
    window.callers.add(newcomer.member_id)
    sims.append(newcomer)
    heapq.heappush(queue, (start + INTERVAL_S, len(sims) - 1))
    ran_at = None
    taken: list[Sim] = []  # the members at the new epoch that the change left alone: the probes
    pick = random.Random(len(sims))  # seeded, apart from the phases
    try:
        while ran_at is None:
            at, index = heapq.heappop(queue)
            clock.advance(at - clock.now())
            if Coordinator.poll(runtime):
                window.fired_polls += 1
            else:
                window.idle_polls.append(Coordinator.last - Coordinator.last_collector)
            sim = sims[index]
            if _regular_beat(runtime, sim, sim is newcomer, window):
                if taken:  # one of them picked at random: not touched just before, as a regular one
                    _probe(runtime, taken[pick.randrange(len(taken))], window)
                taken.append(sim)
            while sim.running != sim.heard:  # gave tasks up: told at once, one extra call
                _beat(runtime, sim)
                window.calls += 1
                window.extra_calls += 1
                window.callers.add(sim.member_id)
            heapq.heappush(queue, (at + INTERVAL_S, index))
            group = model.consumer.groups[GROUP]
            target = group.target.get(newcomer.member_id)
            if sim is newcomer and target and newcomer.running == frozenset(target):
                ran_at = at
        window_cpu = Coordinator.cpu - cpu_start
        collector = Coordinator.collector - collector_start
    finally:
        consumer_model.target_for = timed  # type: ignore[assignment]
    while queue:  # the others finish their round: the group settled again before anything else
        at, index = heapq.heappop(queue)
        if at >= ran_at + INTERVAL_S:
            break
        clock.advance(at - clock.now())
        _beat(runtime, sims[index])
    held: dict[TaskReplica, int] = {}
    for sim in sims:
        for task in sim.running:
            held[task] = held.get(task, 0) + 1
    assert all(count == 1 for count in held.values()), "a task on two members"
    out = window.taken_out()
    return {"cpu": window_cpu - out["total"], "window_cpu": window_cpu,
            "taken_out": out, "collector": collector, "fired_polls": window.fired_polls,
            "regular": window.regular, "assignor": window.assignor_cpu,
            "calls": window.extra_calls, "callers": len(window.callers), "intervals": (ran_at - start) / INTERVAL_S,
            "moved": len(newcomer.running)}


def _regular_beat(runtime: CoordinatorRuntime, sim: Sim, is_newcomer: bool, window: Window) -> bool:
    """A member's regular heartbeat, sorted by what it did: untouched (nothing changed, or only its
    epoch: then True) or the change's (the newcomer's, an assignment in the answer, tasks given up,
    or the group's epoch, target or computation moved during it)."""
    group = runtime.model.consumer.groups[GROUP]
    before = (group.epoch, group.target_epoch, group.computing)
    epoch = sim.epoch
    answer = _beat(runtime, sim)
    window.calls += 1
    window.regular += 1
    untouched = (not is_newcomer and not answer.HasField("assignment") and sim.running == sim.heard
                 and before == (group.epoch, group.target_epoch, group.computing))
    if untouched and sim.epoch == epoch:
        window.plain.append(Coordinator.last - Coordinator.last_collector)
    elif untouched:
        window.epoch_only.append(Coordinator.last - Coordinator.last_collector)
    return untouched and sim.epoch != epoch


def _probe(runtime: CoordinatorRuntime, sim: Sim, window: Window) -> None:
    """One plain heartbeat of a member already at the new epoch, right after another took it: what a
    plain one costs at that moment, so that taking the epoch is priced against it (not a call of the
    change: taken out at its own CPU, counted in no call column). The timers are polled before it, as
    before a regular one: a heartbeat right after another costs less, its code and data still warm."""
    if Coordinator.poll(runtime):
        window.fired_polls += 1
    else:
        window.idle_polls.append(Coordinator.last - Coordinator.last_collector)
    epoch = sim.epoch
    answer = _beat(runtime, sim)
    assert sim.epoch == epoch and not answer.HasField("assignment"), "a probe that was not plain"
    window.probes.append(Coordinator.last - Coordinator.last_collector)


def consumer_formation(members: int, tasks: int, seed: int = 11) -> dict[str, float]:
    """A consumer group of ``members`` formed from nothing: each member joins at its own moment within
    one heartbeat interval (a fleet starting), then heartbeats every interval, and at once when it
    gave tasks up; until every member runs its whole target (the target epoch the group's). The
    coordinator's CPU for all of it (set-up aside: the catalog), every call, and the fake clock's time."""
    runtime, clock = _runtime()
    _call(runtime, "put_tasks", pb.PutTasksRequest(group_id=GROUP, tasks=[pb.Task(task_id=f"t{i}")
                                                                           for i in range(tasks)]))
    rng = random.Random(seed)
    joins = sorted(clock.now() + rng.uniform(0, INTERVAL_S) for _ in range(members))
    sims: list[Sim] = []
    queue: list[tuple[float, int]] = []
    calls = 0
    gc.collect()
    cpu_start = Coordinator.cpu
    for at in joins:  # the joins, each followed by that member's heartbeats (queued)
        clock.advance(at - clock.now())
        Coordinator.poll(runtime)
        sims.append(_join(runtime, f"m{len(sims)}"))
        queue.append((at + INTERVAL_S, len(sims) - 1))
        calls += 1
    heapq.heapify(queue)
    group = runtime.model.consumer.groups[GROUP]
    changed_at = [0.0] * members  # when each member's tasks last changed
    settled = 0
    while settled < members:
        at, index = heapq.heappop(queue)
        clock.advance(at - clock.now())
        Coordinator.poll(runtime)
        sim = sims[index]
        running = sim.running
        _beat(runtime, sim)
        calls += 1
        while sim.running != sim.heard:
            _beat(runtime, sim)
            calls += 1
        if sim.running is not running:
            changed_at[index] = at
        heapq.heappush(queue, (at + INTERVAL_S, index))
        if index == 0:  # counted once per round of the fleet (O(members) each)
            settled = _settled(group, sims)
    cpu = Coordinator.cpu - cpu_start
    assert sum(len(s.running) for s in sims) == tasks, "not every task runs"
    return {"cpu": cpu, "calls": calls, "seconds": max(changed_at) - joins[0]}


def _settled(group: Any, sims: list[Sim]) -> int:
    """How many members run their whole target, if the target is the group's last (else 0)."""
    if group.target_epoch != group.epoch:
        return 0
    return sum(1 for sim in sims if sim.running == group.target.get(sim.member_id, frozenset()))


def classic_change(members: int, tasks: int) -> dict[str, float]:
    row = model_rebalance(members, tasks=tasks)
    return {"cpu": row["cpu"], "assignor": row["leader"], "calls": 3 * members + 3, "callers": members + 1}


def table(sizes: list[int], tasks: int, consumer_only: bool = False) -> None:
    print(f"\nOne member joins a Stable group; {tasks:,} tasks; consumer heartbeat interval {INTERVAL_S:.0f} s; "
          f"coordinator in-process (no network)")
    header = (f"{'members':>8} {'protocol':<9} {'coordinator CPU s':>18} {'assignor CPU s':>15} {'calls':>7} "
              f"{'members calling':>16} {'newcomer runs after':>20} {'load':>16}")
    print(header)
    print("-" * len(header))
    for members in sizes:
        if not consumer_only:
            classic = classic_change(members, tasks)
            print(f"{members:>8,} {'classic':<9} {classic['cpu']:>18.3f} {classic['assignor']:>15.3f} "
                  f"{int(classic['calls']):>7,} {int(classic['callers']):>16,} {'(the whole group)':>20} "
                  f"{_load():>16}", flush=True)
        consumer = consumer_change(members, tasks)
        following = consumer["next"]
        for label, row in ((f"{members:>8,} {'consumer':<9}", consumer), (f"{'':>8} {'(next)':<9}", following)):
            print(f"{label} {row['cpu']:>18.3f} {row['assignor']:>15.3f} {int(row['calls']):>7,} "
                  f"{int(row['callers']):>16,} {row['intervals']:>11.2f} intervals {_load():>16}", flush=True)
        print(f"{'':>8} (consumer: {int(consumer['moved']):,} tasks moved; next: a second member joins once the "
              f"first change settled)", flush=True)
        for label, row in (("consumer", consumer), ("next", following)):
            print(f"{'':>8} ({_taken_out_note(label, row)})", flush=True)
    if consumer_only:
        return
    print(f"\nA consumer group formed from nothing (every member joins within one interval); {tasks:,} tasks")
    header = f"{'members':>8} {'coordinator CPU s':>18} {'calls':>8} {'every member runs its target after':>36} {'load':>16}"
    print(header)
    print("-" * len(header))
    for members in sizes:
        formed = consumer_formation(members, tasks)
        print(f"{members:>8,} {formed['cpu']:>18.3f} {int(formed['calls']):>8,} "
              f"{formed['seconds']:>12.1f} s ({formed['seconds'] / INTERVAL_S:.1f} intervals) {_load():>16}",
              flush=True)


def _taken_out_note(label: str, row: dict[str, Any]) -> str:
    """What the change's CPU is the window's less of, so that a reader can check the subtraction."""
    out = row["taken_out"]
    return (f"{label}: window {row['window_cpu']:.3f} s less {out['untouched_n']:,} untouched members' heartbeats "
            f"{out['untouched']:.3f} s, {out['idle_polls_n']:,} timer polls that fired none {out['idle_polls']:.3f} s "
            f"and {out['probes_n']:,} probes {out['probes']:.3f} s, plus {out['epoch_only_n']:,} new epochs taken x "
            f"({out['epoch_median'] * 1e6:.1f} - {out['plain_median'] * 1e6:.1f} µs, medians of those heartbeats and "
            f"of the plain probes between them) {out['taking']:.3f} s = {row['cpu']:.3f} s; the collector's "
            f"{row['collector']:.3f} s and {row['fired_polls']} timer polls that fired in it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--sizes", default="", help="group sizes (default 1000,10000; --quick 100)")
    parser.add_argument("--tasks", type=int, default=0, help="catalog size (default 100,000; --quick 1,000)")
    parser.add_argument("--consumer-only", action="store_true",
                        help="the consumer protocol's change rows only (no classic row, no formation table)")
    args = parser.parse_args(argv)
    logging_off()
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([100] if args.quick else [1000, 10_000])
    tasks = args.tasks or (1_000 if args.quick else 100_000)
    table(sizes, tasks, args.consumer_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
