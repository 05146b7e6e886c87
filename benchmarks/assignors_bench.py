"""Assignor benchmark: time, balance and movement, ours next to kafka-python's.

Run ``python benchmarks/assignors_bench.py`` (``--quick`` for a small smoke
run). Scenarios, at 100,000 tasks over 1,000 members by default:

* Kafka replica shift, RF 3, without and with racks (10 racks): the bare
  function and the ``kafka-replica-shift`` assignor (which also builds the
  ``TaskReplica`` objects).
* ``round-robin`` and ``sticky`` from scratch, then after one member leaves
  and after one joins, all starting from the same previous assignment (our
  sticky result from scratch), so movement compares like with like.
* The consumer protocol's server-side target when one member joins 10,000 (100,000 tasks): the
  coordinator's whole computation, each assignor's full pass against its incremental one (issue 34).
* The same with kafka-python's ``RoundRobinPartitionAssignor`` and
  ``StickyPartitionAssignor`` (one topic whose partitions are the tasks, every
  member subscribed, the previous assignment passed as sticky user data),
  each run in a child process under ``--kafka-timeout``: kafka-python's sticky
  assignor does not finish at full size in reasonable time, and the table
  says so. A second, smaller comparison size (``--compare``) lets it finish.

Times are the best of ``--repeat`` runs (wall clock, ``time.perf_counter``);
on a shared machine the best run is the least disturbed one. Before each
timed run the heap is collected and frozen (``gc.freeze``), on both sides,
so a run pays garbage collection only for the objects it creates. Balance is
max/mean of replicas per member (1.00 is perfect); moved counts replicas
whose owner changed.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import multiprocessing as mp
import os
import queue
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

try:
    from groupcoord import assignors  # noqa: F401  (installed, or on PYTHONPATH)
except ImportError:  # run as a script from a checkout: the repository root holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.kafka_replica import KafkaReplicaShiftAssignor, assign_replicas_to_brokers
from groupcoord.assignors.metrics import balance, movement, rack_spread
from groupcoord.assignors.round_robin import RoundRobinAssignor
from groupcoord.assignors.sticky import StickyAssignor


def _kafka_python_version() -> str | None:
    """kafka-python's version if importable; looked up without importing it (it is only used in child processes)."""
    if importlib.util.find_spec("kafka") is None:
        return None
    try:
        return importlib.metadata.version("kafka-python")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


KAFKA_PYTHON = _kafka_python_version()

TOPIC = "tasks"


@dataclass
class Row:
    scenario: str
    implementation: str
    size: str
    seconds: float | None
    max_over_mean: float | None = None
    moved: int | None = None
    note: str = ""


def best_of(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        result = None
        with settled_heap():
            start = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - start)
    return best, result


@contextmanager
def settled_heap() -> Iterator[None]:
    """Collect, then freeze what exists, so the timed run pays GC only for objects it creates.

    The benchmark holds inputs and earlier results that a real leader would
    not, and kafka-python runs in a fresh child; freezing puts both sides on
    the same footing. The collector stays on during the run.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def member_ids(n: int) -> list[str]:
    return [f"m{i:04d}" for i in range(n)]


def task_ids(n: int) -> list[str]:
    return [f"t{i:06d}" for i in range(n)]


# -- replica shift ---------------------------------------------------------------------------


def replica_shift_rows(n_tasks: int, n_members: int, repeat: int) -> list[Row]:
    rows = []
    size = f"{n_tasks:,} x RF3 / {n_members:,}"
    ids = member_ids(n_members)
    racks = {m: f"rack{i % 10}" for i, m in enumerate(ids)}
    for label, rack_map in (("no racks", None), ("10 racks", racks)):
        seconds, placement = best_of(
            repeat, lambda rm=rack_map: assign_replicas_to_brokers(ids, n_tasks, 3, racks=rm, rng=random.Random(1))
        )
        per_member: dict[str, list[TaskReplica]] = {m: [] for m in ids}
        for pid, brokers in placement.items():
            for replica, broker in enumerate(brokers):
                per_member[broker].append(TaskReplica(str(pid), replica))
        leaders = balance({m: [r for r in rs if r.replica == 0] for m, rs in per_member.items()})
        note = f"leaders max/mean {leaders.count_max_over_mean:.2f}"
        if rack_map:
            note += f", rack spread {rack_spread(per_member, rack_map):.2f}"
        rows.append(
            Row(
                f"replica shift fn, {label}",
                "groupcoord",
                size,
                seconds,
                balance(per_member).count_max_over_mean,
                None,
                note,
            )
        )
        members = tuple(MemberInfo(m, rack=rack_map[m] if rack_map else "") for m in ids)
        tasks = tuple(TaskSpec(t, replicas=3) for t in task_ids(n_tasks))
        context = AssignmentContext("bench", 1, members, tasks, rng=random.Random(1))
        seconds, result = best_of(repeat, lambda c=context: KafkaReplicaShiftAssignor().assign(c))
        rows.append(
            Row(
                f"kafka-replica-shift assignor, {label}",
                "groupcoord",
                size,
                seconds,
                balance(result.members).count_max_over_mean,
            )
        )
    return rows


# -- round-robin and sticky ------------------------------------------------------------------


def context_for(ids: list[str], tasks: tuple[TaskSpec, ...], owned: dict[str, list[TaskReplica]]) -> AssignmentContext:
    members = tuple(MemberInfo(m, owned=tuple(owned.get(m, ())), owned_generation=1) for m in ids)
    return AssignmentContext("bench", 2, members, tasks)


@dataclass
class Plan:
    """Per scenario: the members present and the previous assignment (member -> task numbers)."""

    members: dict[str, list[str]]
    previous: dict[str, dict[str, list[int]]]


def ours_rows(n_tasks: int, n_members: int, repeat: int) -> tuple[list[Row], Plan]:
    """Our round-robin and sticky; also returns the plan kafka-python replays."""
    ids = member_ids(n_members)
    tasks = tuple(TaskSpec(t) for t in task_ids(n_tasks))
    size = f"{n_tasks:,} / {n_members:,}"
    fresh = StickyAssignor().assign(context_for(ids, tasks, {})).members
    leave_ids = [m for m in ids if m != ids[n_members // 2]]
    join_ids = [*ids, f"m{n_members:04d}"]
    scenarios = {
        "from scratch": (ids, {}),
        "one member leaves": (leave_ids, fresh),
        "one member joins": (join_ids, fresh),
    }
    rows = []
    for assignor in (RoundRobinAssignor(), StickyAssignor()):
        for scenario, (members, previous) in scenarios.items():
            context = context_for(members, tasks, previous)
            seconds, result = best_of(repeat, lambda c=context, a=assignor: a.assign(c))
            moved = movement(previous, result.members) if previous else None
            rows.append(
                Row(
                    f"{assignor.name}, {scenario}",
                    "groupcoord",
                    size,
                    seconds,
                    balance(result.members).count_max_over_mean,
                    moved,
                )
            )
    plain = {m: [int(r.task_id[1:]) for r in rs] for m, rs in fresh.items()}
    plan = Plan(
        members={scenario: members for scenario, (members, _) in scenarios.items()},
        previous={scenario: (plain if previous else {}) for scenario, (_, previous) in scenarios.items()},
    )
    return rows, plan


def _kafka_python_child(kind: str, n_tasks: int, members: list[str], previous: dict[str, list[int]], out: Any) -> None:
    """Run one kafka-python assignment; put ``(seconds, answer)`` or ``(None, error text)`` on ``out``."""
    try:
        out.put(_kafka_python_run(kind, n_tasks, members, previous))
    except Exception as exc:  # noqa: BLE001 - any failure becomes a table note, e.g. kafka-python 2.x's older API
        out.put((None, f"failed: {type(exc).__name__}: {exc}"[:80]))


def _kafka_python_run(
    kind: str, n_tasks: int, members: list[str], previous: dict[str, list[int]]
) -> tuple[float, dict[str, list[int]]]:
    """kafka-python 3.x API: ``assign(cluster, [member with member_id, group_instance_id, metadata])``."""
    from types import SimpleNamespace

    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    partitions = set(range(n_tasks))
    cluster = SimpleNamespace(topics=lambda: {TOPIC}, partitions_for_topic=lambda t: partitions if t == TOPIC else None)
    group = []
    for member_id in members:
        user_data: Any = b""
        if kind == "sticky" and member_id in previous:
            user_data = StickyAssignorUserData(previous_assignment=[(TOPIC, previous[member_id])], generation=1)
        subscription = ConsumerProtocolSubscription(version=0, topics=[TOPIC], user_data=user_data)
        group.append(SimpleNamespace(member_id=member_id, group_instance_id=None, metadata=subscription))
    assignor = RoundRobinPartitionAssignor() if kind == "roundrobin" else StickyPartitionAssignor()
    with settled_heap():
        start = time.perf_counter()
        answer = assignor.assign(cluster, group)
        seconds = time.perf_counter() - start
    return seconds, {m: [p.partition for p in a.partitions()] for m, a in answer.items()}


def kafka_python_rows(n_tasks: int, plan: Plan, timeout: float) -> list[Row]:
    size = f"{n_tasks:,} / {len(plan.members['from scratch']):,}"
    if KAFKA_PYTHON is None:
        return [
            Row(
                "kafka-python comparison",
                "kafka-python",
                size,
                None,
                note="skipped: kafka-python not importable (pip install 'groupcoord[bench]')",
            )
        ]
    rows = []
    ctx = mp.get_context("fork")
    for kind, label in (("roundrobin", "RoundRobinPartitionAssignor"), ("sticky", "StickyPartitionAssignor")):
        for scenario in ("from scratch", "one member leaves", "one member joins"):
            previous = plan.previous[scenario]
            inbox = ctx.Queue()
            child = ctx.Process(
                target=_kafka_python_child, args=(kind, n_tasks, plan.members[scenario], previous, inbox)
            )
            child.start()
            try:
                seconds, answer = inbox.get(timeout=timeout)
            except queue.Empty:  # the child is still computing
                child.kill()
                child.join()
                rows.append(
                    Row(
                        f"{kind}, {scenario}",
                        f"kafka-python {label}",
                        size,
                        None,
                        note=f"did not finish in {timeout:.0f} s",
                    )
                )
                continue
            child.join()
            if seconds is None:
                rows.append(Row(f"{kind}, {scenario}", f"kafka-python {label}", size, None, note=answer))
                continue
            counts = [len(v) for v in answer.values()]
            before = {p: m for m, ps in previous.items() for p in ps}
            moved = sum(1 for m, ps in answer.items() for p in ps if before.get(p, m) != m) if previous else None
            rows.append(
                Row(
                    f"{kind}, {scenario}",
                    f"kafka-python {label}",
                    size,
                    seconds,
                    max(counts) * len(counts) / sum(counts),
                    moved,
                )
            )
    return rows


# -- output ----------------------------------------------------------------------------------


def render(rows: list[Row], title: str) -> None:
    header = ("scenario", "implementation", "size", "time s", "max/mean", "moved", "note")
    cells = [
        (
            r.scenario,
            r.implementation,
            r.size,
            "-" if r.seconds is None else f"{r.seconds:.3f}",
            "-" if r.max_over_mean is None else f"{r.max_over_mean:.3f}",
            "-" if r.moved is None else f"{r.moved:,}",
            r.note,
        )
        for r in rows
    ]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
        print(title)
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        print("  ".join("-" * w for w in widths))
        for c in cells:
            print("  ".join(v.ljust(w) for v, w in zip(c, widths)))
        return
    table = Table(title=title)
    for h in header:
        table.add_column(h, justify="right" if h in ("time s", "max/mean", "moved") else "left")
    for c in cells:
        table.add_row(*c)
    Console(width=200).print(table)


LARGE_ASSIGNORS = ("round-robin", "sticky", "kafka-replica-shift", "balanced", "pulsar-threshold",
                   "pulsar-uniform", "pulsar-avg", "pulsar-overload", "pulsar-transfer")


def large_context(n_tasks: int, n_members: int) -> AssignmentContext:
    """One member joins a group of ``n_members`` that runs ``n_tasks`` tasks round-robin, with a load
    snapshot of every task and worker (seeded rates; one worker in ten twice as busy): what the leader
    of a large group hands its assignor when a member joins."""
    from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats

    rng = random.Random(27)
    ids = member_ids(n_members)
    tasks = tuple(TaskSpec(t) for t in task_ids(n_tasks))
    owned: dict[str, list[TaskReplica]] = {m: [] for m in ids}
    task_stats = {}
    for i, task in enumerate(tasks):
        owner = ids[i % n_members]
        owned[owner].append(TaskReplica(task.task_id, 0))
        rate = rng.uniform(10, 100) * (2 if i % n_members % 10 == 0 else 1)
        task_stats[task.task_id] = TaskLoadStats(
            task.task_id, owner, short_samples=10, short_msg_rate_in=rate, short_msg_rate_out=rate,
            short_msg_throughput_in=rate * 1024, short_msg_throughput_out=rate * 1024, long_samples=1000,
            long_msg_rate_in=rate, long_msg_rate_out=rate, long_msg_throughput_in=rate * 1024,
            long_msg_throughput_out=rate * 1024, topics=1)
    workers = {}
    for j, member in enumerate(ids):
        busy = 0.9 if j % 10 == 0 else rng.uniform(0.2, 0.6)
        mine = owned[member]
        rate_in = sum(task_stats[r.task_id].long_msg_rate_in for r in mine)
        workers[member] = WorkerLoadStats(
            member, cpu_usage=busy * 100, cpu_limit=100, memory_usage=busy * 1024, memory_limit=1024,
            direct_memory_usage=0, direct_memory_limit=1024, bandwidth_in_usage=busy * 1e6, bandwidth_in_limit=1e6,
            bandwidth_out_usage=busy * 1e6, bandwidth_out_limit=1e6, num_tasks=len(mine), long_msg_rate_in=rate_in,
            long_msg_rate_out=rate_in, long_msg_throughput_in=rate_in * 1024, long_msg_throughput_out=rate_in * 1024)
    members = tuple(MemberInfo(m, owned=tuple(owned[m]), owned_generation=1) for m in ids)
    members += (MemberInfo(f"m{n_members:05d}"),)
    snapshot = LoadSnapshot("bench", "s1", 1, MappingProxyType(task_stats), MappingProxyType(workers))
    return AssignmentContext("bench", 2, members, tasks, load_snapshot=snapshot, rng=random.Random(2))


def large_rows(n_tasks: int, n_members: int, repeat: int) -> list[Row]:
    """Every built-in assignor on one large group (``large_context``), timed from the context to the
    assignment; balance and movement as elsewhere in this table."""
    from groupcoord.assignors.registry import get_assignor

    context = large_context(n_tasks, n_members)
    previous = {m.member_id: list(m.owned) for m in context.members}
    size = f"{n_tasks:,} / {n_members:,} +1"
    rows = []
    for name in LARGE_ASSIGNORS:
        kind = type(get_assignor(name))
        seconds = cpu = float("inf")
        for _ in range(repeat):
            assignor = kind()  # a fresh one each run: balanced and the Pulsar assignors remember past rounds
            with settled_heap():
                cpu_start, start = time.process_time(), time.perf_counter()
                result = assignor.assign(context)
                seconds = min(seconds, time.perf_counter() - start)
                cpu = min(cpu, time.process_time() - cpu_start)
        rows.append(Row("one member joins", name, size, seconds,
                        balance(result.members).count_max_over_mean, movement(previous, result.members),
                        f"CPU {cpu:.3f} s" + ("; target < 1 s" if cpu >= 1 else "")))
    return rows


TARGET_ASSIGNORS = ("sticky", "balanced", "pulsar-threshold", "pulsar-uniform", "pulsar-avg", "pulsar-overload",
                    "pulsar-transfer", "round-robin")
"""The assignors of the server-side target rows: every built-in with an incremental target, and
round-robin, which has none (its row is its full pass)."""


def server_target_rows(n_tasks: int, n_members: int, repeat: int) -> list[Row]:
    """The consumer protocol's server-side target when one member joins (issue 34): the coordinator's
    whole job off the loop (``consumer_target.target_for``: context, assignor, checks), each assignor's
    full pass against its incremental one from the previous target (no load snapshot: with one, the
    load-aware ones take their full pass); the O(members) copies the loop makes for it (``inputs_of``)
    are inside the timed part too. CPU time, best of ``repeat``. Each run is a group of its own name,
    so an assignor that keeps state per group starts each one from the same history."""
    from groupcoord.assignors.incremental import IncrementalAssignor
    from groupcoord.assignors.registry import get_assignor
    from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
    from groupcoord.coordinator.model.consumer_target import TargetInputs, change_since, target_for
    from groupcoord.v1 import groupcoord_pb2 as pb

    ids = member_ids(n_members)
    catalog = CatalogSnapshot(1, {t: pb.Task(task_id=t) for t in task_ids(n_tasks)})
    owned: dict[str, list[TaskReplica]] = {m: [] for m in ids}
    for i, task_id in enumerate(sorted(catalog.tasks)):
        owned[ids[i % n_members]].append(TaskReplica(task_id, 0))
    target = {m: frozenset(replicas) for m, replicas in owned.items()}
    newcomer = f"m{n_members:05d}"
    members = tuple(MemberInfo(m, owned=tuple(owned[m]), owned_generation=1) for m in ids) + (MemberInfo(newcomer),)
    everyone = {*ids, newcomer}
    catalog.plain()  # computed once per catalog version, by the full pass that made the previous target
    runs = iter(range(1 << 30))

    def inputs(name: str, incremental: bool) -> TargetInputs:
        previous = {m: target[m] for m in everyone if m in target} if incremental else None
        return TargetInputs(f"bench-{next(runs)}", 2, name, members, catalog, None, previous=previous,
                            previous_catalog=catalog if incremental else None)

    rows = []
    size = f"{n_tasks:,} / {n_members:,} +1"
    for name in TARGET_ASSIGNORS:
        assignor = get_assignor(name)
        has_one = isinstance(assignor, IncrementalAssignor)
        for label, incremental in (("full pass", False), ("incremental", True)) if has_one else (("full pass", False),):
            if incremental:  # the incremental path is taken, not declined for the full pass
                change = change_since(inputs(name, True))
                assert change is not None and assignor.assign_incremental(change) is not None, name  # type: ignore[attr-defined]
            seconds = cpu = float("inf")
            for _ in range(repeat):
                run = inputs(name, incremental)
                with settled_heap():
                    cpu_start, start = time.process_time(), time.perf_counter()
                    result = target_for(run, everyone)
                    seconds = min(seconds, time.perf_counter() - start)
                    cpu = min(cpu, time.process_time() - cpu_start)
            assert isinstance(result, dict), result
            note = f"CPU {cpu:.3f} s" + ("; target < 0.1 s" if incremental and cpu >= 0.1 else "")
            rows.append(Row("server-side target, one member joins", f"{name}, {label}", size, seconds,
                            balance(result).count_max_over_mean, movement(owned, result),
                            note if has_one else note + "; no incremental form (member order decides every deal)"))
    return rows


SNAPSHOT_ASSIGNORS = ("balanced", "pulsar-threshold", "pulsar-avg")


def snapshot_target_rows(n_tasks: int, n_members: int, repeat: int) -> list[Row]:
    """The server-side target of ``balanced`` and two ``pulsar-*`` when one member joins under the load
    snapshot a full pass of the group has read (``large_context``'s): that full pass untimed, then the
    join, by a full pass and by the incremental round (on a twin group with the same history). CPU,
    best of ``repeat``."""
    rows = []
    for name in SNAPSHOT_ASSIGNORS:
        rows += _snapshot_target_rows(name, n_tasks, n_members, repeat)
    return rows


def _snapshot_target_rows(name: str, n_tasks: int, n_members: int, repeat: int) -> list[Row]:
    from groupcoord.assignors.registry import get_assignor
    from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
    from groupcoord.coordinator.model.consumer_target import TargetInputs, target_for
    from groupcoord.v1 import groupcoord_pb2 as pb
    from groupcoord.wire import snapshot_to_pb

    context = large_context(n_tasks, n_members)
    assert context.load_snapshot is not None
    snapshot = snapshot_to_pb(context.load_snapshot)
    catalog = CatalogSnapshot(1, {t.task_id: pb.Task(task_id=t.task_id) for t in context.tasks})
    catalog.plain()
    before, newcomer = context.members[:-1], context.members[-1]
    ids = {m.member_id for m in before}
    everyone = {*ids, newcomer.member_id}
    assignor = get_assignor(name)
    incremental_rounds: list[object] = []
    plain_method = assignor.assign_incremental  # type: ignore[attr-defined]

    def counted(change: Any) -> Any:
        answer = plain_method(change)
        incremental_rounds.append(answer)
        return answer

    runs = iter(range(1 << 30))
    rows = []
    size = f"{n_tasks:,} / {n_members:,} +1"
    for label, incremental in (("full pass", False), ("incremental", True)):
        seconds = cpu = float("inf")
        for _ in range(repeat):
            group = f"bench-snapshot-{next(runs)}"
            first = target_for(TargetInputs(group, 1, name, before, catalog, snapshot), ids)
            assert isinstance(first, dict), first
            members = tuple(MemberInfo(m, owned=tuple(sorted(first[m])), owned_generation=1) for m in sorted(ids))
            run = TargetInputs(group, 2, name, members + (newcomer,), catalog, snapshot,
                               previous=first if incremental else None, previous_catalog=catalog if incremental else None)
            assignor.assign_incremental = counted  # type: ignore[attr-defined]
            try:
                with settled_heap():
                    cpu_start, start = time.process_time(), time.perf_counter()
                    result = target_for(run, everyone)
                    seconds = min(seconds, time.perf_counter() - start)
                    cpu = min(cpu, time.process_time() - cpu_start)
            finally:
                del assignor.assign_incremental  # type: ignore[attr-defined]
        assert isinstance(result, dict), result
        assert (not incremental) or (incremental_rounds and incremental_rounds[-1] is not None), "declined"
        rows.append(Row("server-side target, one member joins, snapshot read", f"{name}, {label}", size,
                        seconds, balance(result).count_max_over_mean, movement({m: list(first[m]) for m in ids}, result),
                        f"CPU {cpu:.3f} s" + ("; target < 0.1 s" if incremental and cpu >= 0.1 else "")))
    return rows


def appended_target_rows(n_tasks: int, n_members: int, repeat: int, added: int = 100) -> list[Row]:
    """``kafka-replica-shift``'s server-side target when ``added`` tasks whose ids sort after the others
    join the catalog (Kafka's partitions added with ``startPartitionId``), members unchanged: the full pass
    against the incremental round from the previous target (each on a group of its own with the same
    history: its first full pass untimed). CPU, best of ``repeat``."""
    from groupcoord.assignors.registry import get_assignor
    from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
    from groupcoord.coordinator.model.consumer_target import TargetInputs, target_for
    from groupcoord.v1 import groupcoord_pb2 as pb

    ids = member_ids(n_members)
    members = tuple(MemberInfo(m) for m in ids)
    old = CatalogSnapshot(1, {t: pb.Task(task_id=t) for t in task_ids(n_tasks)})
    new = CatalogSnapshot(2, {**old.tasks, **{f"z{i:06d}": pb.Task(task_id=f"z{i:06d}") for i in range(added)}})
    old.plain(), new.plain()
    assignor = get_assignor("kafka-replica-shift")
    answers: list[object] = []
    plain_method = assignor.assign_incremental  # type: ignore[attr-defined]
    runs = iter(range(1 << 30))
    rows = []
    size = f"{n_tasks:,} +{added} / {n_members:,}"
    for label, incremental in (("full pass", False), ("incremental", True)):
        seconds = cpu = float("inf")
        for _ in range(repeat):
            group = f"bench-appended-{next(runs)}"
            first = target_for(TargetInputs(group, 1, "kafka-replica-shift", members, old, None), set(ids))
            assert isinstance(first, dict), first
            run = TargetInputs(group, 2, "kafka-replica-shift", members, new, None,
                               previous=first if incremental else None, previous_catalog=old if incremental else None)
            assignor.assign_incremental = lambda change: answers.append(plain_method(change)) or answers[-1]  # type: ignore[attr-defined]
            try:
                with settled_heap():
                    cpu_start, start = time.process_time(), time.perf_counter()
                    result = target_for(run, set(ids))
                    seconds = min(seconds, time.perf_counter() - start)
                    cpu = min(cpu, time.process_time() - cpu_start)
            finally:
                del assignor.assign_incremental  # type: ignore[attr-defined]
        assert isinstance(result, dict), result
        assert (not incremental) or (answers and answers[-1] is not None), "declined"
        rows.append(Row("server-side target, tasks added at the end", f"kafka-replica-shift, {label}", size, seconds,
                        balance(result).count_max_over_mean, movement({m: list(first[m]) for m in ids}, result),
                        f"CPU {cpu:.3f} s"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one run each (smoke test)")
    parser.add_argument("--tasks", type=int, default=None, help="tasks / partitions (default 100,000; quick 500)")
    parser.add_argument("--members", type=int, default=None, help="members (default 1,000; quick 10)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per measurement, best kept (default 3; quick 1)")
    parser.add_argument("--kafka-timeout", type=float, default=None, help="seconds per kafka-python run (60; quick 10)")
    parser.add_argument(
        "--compare",
        default=None,
        help="extra TASKSxMEMBERS size for the kafka-python comparison "
        "(default 5000x50; none with --quick; 'none' to skip)",
    )
    parser.add_argument("--no-large", action="store_true", help="skip the 10,000 members x 100,000 tasks table")
    parser.add_argument("--only-large", action="store_true", help="only the 10,000 members x 100,000 tasks table")
    parser.add_argument("--only-target", action="store_true",
                        help="only the server-side target rows (one member joins 10,000; 100,000 tasks)")
    args = parser.parse_args(argv)
    if args.only_target:
        repeat = args.repeat or (1 if args.quick else 3)
        size = (5_000, 500) if args.quick else (100_000, 10_000)
        rows = server_target_rows(*size, repeat) + snapshot_target_rows(*size, repeat)
        rows += appended_target_rows(*size, repeat)
        render(rows, f"the consumer protocol's server-side target (issue 34): best of {repeat} run(s), "
               f"load average {os.getloadavg()[0]:.2f}")
        return 0
    if args.only_large:
        repeat = args.repeat or (1 if args.quick else 3)
        large = large_rows(*((5_000, 500) if args.quick else (100_000, 10_000)), repeat)
        large += server_target_rows(*((5_000, 500) if args.quick else (100_000, 10_000)), repeat)
        render(large, f"every built-in assignor at the size of a large group (issue 27): best of {repeat} run(s), "
               f"load average {os.getloadavg()[0]:.2f}")
        return 0
    n_tasks = args.tasks or (500 if args.quick else 100_000)
    n_members = args.members or (10 if args.quick else 1_000)
    repeat = args.repeat or (1 if args.quick else 3)
    timeout = args.kafka_timeout or (10.0 if args.quick else 60.0)
    compare = args.compare or ("none" if args.quick else "5000x50")

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpu(s), load average {load:.2f}, "
        f"kafka-python {KAFKA_PYTHON or 'not installed: comparison skipped'}"
    )
    rows = replica_shift_rows(n_tasks, n_members, repeat)
    sizes = [(n_tasks, n_members)]
    if compare != "none":
        t, _, m = compare.partition("x")
        sizes.append((int(t), int(m)))
    for size_tasks, size_members in sizes:
        ours, plan = ours_rows(size_tasks, size_members, repeat)
        rows += ours
        rows += kafka_python_rows(size_tasks, plan, timeout)
    render(rows, f"assignors: best of {repeat} run(s)")
    if not args.no_large:
        large = large_rows(*((5_000, 500) if args.quick else (100_000, 10_000)), repeat)
        large += server_target_rows(*((5_000, 500) if args.quick else (100_000, 10_000)), repeat)
        large += snapshot_target_rows(*((5_000, 500) if args.quick else (100_000, 10_000)), repeat)
        render(large, f"every built-in assignor at the size of a large group (issue 27): best of {repeat} run(s), "
               f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
