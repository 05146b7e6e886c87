"""Act two of ``groupcoord demo``: a hot member, the Spark job's snapshots, and what each strategy moves.

One group per load-aware assignor, three in-process workers each. Every group gets the same
imbalance (``demo_scenario``): one member runs two hot tasks, another carries a foreign CPU
load. The workers report their load; each round the statistics job (one warm local Spark
session) folds in what is new and publishes a snapshot; each group's leader asks its assignor
whether it would move something on it (the shedding interval shortened to 0.5 s for the demo)
and, if so, the group rebalances. After the rounds, ``demo_balance`` compares the first
snapshot with the last, prints per group who carried what before and after and what moved,
``demo_plot`` draws it, and the demo fails if a strategy that should have relieved the hot
member did not.
"""

from __future__ import annotations

import os
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import RebalanceCheck
from groupcoord.assignors.registry import get_assignor
from groupcoord.assignors.snapshot import LoadSnapshot
from groupcoord.cli.demo_balance import Outcome, failures, format_outcome, member_loads
from groupcoord.cli.demo_plot import plot_outcomes
from groupcoord.cli.demo_scenario import CPU_PER_MSG, HOT_FACTORS, LoadModel, ScenarioReporter
from groupcoord.cli.narrate import DemoFailed, GroupCheck, say, stable, wait_for_group
from groupcoord.cli.stats import publish_snapshots
from groupcoord.loadstats.report_policy import ReportPolicy
from groupcoord.loadstats.sample_log import SampleLog
from groupcoord.plots import MISSING_HINT
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerClient, WorkerConfig

__all__ = ["ROUNDS", "STRATEGIES", "Strategy", "act_two", "session_ms", "start_spark"]

TASKS_PER_GROUP = 12
ROUNDS = 3
RECHECK_S = 0.5
"""how often a leader asks its assignor about the newest snapshot (Pulsar: every minute)."""
DEMO_SPARK_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
"""The JVM's quick compiler only. A demo's jobs are short and tiny: most of their time went to the
optimizing compiler (C2) working on Spark's own code, on the cores the job needs, for code that
never ran long enough to pay it back. Measured on 2 busy cores: the first refresh 60 s -> 25 s,
the session start 20 s -> 9 s."""


@dataclass(frozen=True)
class Strategy:
    assignor: str
    how: str
    expect_move: bool = True
    note: str = ""
    """why it moves nothing here, when that is by design."""


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("pulsar-threshold", "sheds what is 10 points over the mean usage; places by usage"),
    Strategy("pulsar-overload", "sheds above 85% usage; places by msg/s (blind to foreign CPU)"),
    Strategy("pulsar-uniform", "moves 20% of the msg/s gap between busiest and idlest"),
    Strategy("pulsar-avg", "PIP-364: pairs members by score, acts on 2 high hits in a row"),
    Strategy("pulsar-transfer", "PIP-192: sheds while the usage spread is over its target",
             expect_move=False, note=f"by design it acts after more than 3 rounds in a row over its target; "
                                     f"the demo runs {ROUNDS}"),
    Strategy("balanced", "ours: moves until busiest/mean <= 1.03, each move must pay off"),
)


class _Quiet:
    def on_assigned(self, tasks: Sequence[Any], generation: int) -> None:
        pass

    def on_revoked(self, tasks: Sequence[Any]) -> None:
        pass


class _Log:
    """What each group's leader did with each snapshot: its assignor's verdict, and the rounds it assigned with."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.verdicts: dict[tuple[str, str], bool] = {}
        self.assigned: dict[tuple[str, str], int] = {}

    def judged(self, group: str, snapshot_id: str, verdict: bool) -> None:
        with self._cond:
            self.verdicts.setdefault((group, snapshot_id), verdict)
            self._cond.notify_all()

    def assigning(self, group: str, snapshot_id: str, generation: int) -> None:
        """The leader of ``group`` assigns ``generation`` on ``snapshot_id`` (kept: the newest such generation)."""
        with self._cond:
            self.assigned[(group, snapshot_id)] = max(generation, self.assigned.get((group, snapshot_id), 0))
            self._cond.notify_all()

    def verdict(self, group: str, snapshot_id: str, timeout: float = 180.0) -> bool:
        """Wait until the leader of ``group`` has judged snapshot ``snapshot_id``; its verdict."""
        with self._cond:
            if not self._cond.wait_for(lambda: (group, snapshot_id) in self.verdicts, timeout):
                raise DemoFailed(f"the leader of {group} never looked at snapshot {snapshot_id}")
            return self.verdicts[(group, snapshot_id)]


class _Watched:
    """Wraps an assignor to tell the demo what the leader decided, and asks it every ``RECHECK_S``."""

    def __init__(self, inner: Any, log: _Log) -> None:
        self.inner = inner
        self.name = inner.name
        self._log = log

    @property
    def recheck_interval_s(self) -> float:
        # written out, not forwarded by __getattr__: from Python 3.12 isinstance() against a
        # runtime-checkable Protocol (RebalanceCheck) ignores __getattr__
        return RECHECK_S if isinstance(self.inner, RebalanceCheck) else 0.0

    def needs_rebalance(self, context: Any) -> bool:
        verdict = isinstance(self.inner, RebalanceCheck) and self.inner.needs_rebalance(context)
        if context.load_snapshot is not None:
            self._log.judged(context.group_id, context.load_snapshot.snapshot_id, verdict)
        return verdict

    def assign(self, context: Any) -> Any:
        result = self.inner.assign(context)
        if context.load_snapshot is not None:
            self._log.assigning(context.group_id, context.load_snapshot.snapshot_id, context.generation)
        return result


def start_spark() -> tuple[Any, float]:
    """The local Spark session every round runs on, and the seconds it took to start.

    The demo calls this before it starts its coordinator: PySpark forks the JVM's launcher, and a
    fork while gRPC threads are busy can crash the child in gRPC's fork handler (seen once when
    the session started beside act two's workers)."""
    # lazy: PySpark is the stats extra; the demo runs act one without it
    from groupcoord.loadstats.job import build_session

    started = time.monotonic()
    spark = build_session("local[2]", driver_memory="1g", extra_conf=DEMO_SPARK_CONF)
    return spark, time.monotonic() - started


class _Refresher:
    """The statistics job in this process, on one warm Spark session: the first refresh folds in the
    whole log; the next read only the sample files they have not seen."""

    def __init__(self, spark: Any, root: Path, address: str) -> None:
        self.spark = spark
        self.samples = str(root / "samples")
        self.out = str(Path(tempfile.mkdtemp(prefix="snapshot-", dir=root)))
        self.address = address
        self.costs: list[float] = []

    def refresh(self, label: str) -> dict[str, LoadSnapshot]:
        """Fold in what is new, write the snapshot, publish it; returns the snapshots published, by group."""
        from groupcoord.loadstats.snapshot_io import read_snapshots  # lazy: pyarrow (the stats extra)
        from groupcoord.loadstats.stream import run_incremental  # lazy: PySpark (the stats extra)

        print(f"   $ groupcoord stats --samples {self.samples} --out {self.out} --coordinator {self.address}"
              f"   ({label})", flush=True)
        result = run_incremental(self.samples, self.out, spark=self.spark, master=None)
        sent = publish_snapshots(self.out, self.address)
        self.costs.append(result.wall_time_s)
        print(f"   {result.extra.get('rows_new', 0)} new sample row(s), {result.tasks} task(s), {result.workers} "
              f"worker(s) in {result.wall_time_s:.1f}s; published to {len(sent)} group(s)", flush=True)
        snapshots = read_snapshots(self.out)
        return {g: snapshots[g] for g in sent}


@dataclass
class _Group:
    strategy: Strategy
    name: str
    model: LoadModel
    ids: dict[str, str]  # worker name -> member id, when the first snapshot was taken
    first: dict[str, tuple[str, ...]]  # worker name -> tasks, when the first snapshot was taken
    last: dict[str, tuple[str, ...]]  # ... when the latest snapshot was taken
    moved_in: list[int]
    generation: int = 0  # ... and the generation then
    last_ids: dict[str, str] = field(default_factory=dict)  # ... and the member ids then (a missed session
    # makes a worker join again under a new id)


def _assignment(described: pb.DescribeGroupResponse) -> dict[str, tuple[str, ...]]:
    return {m.member.client_id: tuple(sorted(t.task_id for t in m.assigned)) for m in described.members}


def _member_ids(described: pb.DescribeGroupResponse) -> dict[str, str]:
    return {m.member.client_id: m.member.member_id for m in described.members}


def _assigned_on(log: _Log, group: str, snapshot_id: str) -> GroupCheck:
    """Check: Stable, in or after the generation its leader assigned on ``snapshot_id``."""
    settled = stable(3, TASKS_PER_GROUP)

    def check(d: pb.DescribeGroupResponse) -> bool:
        generation = log.assigned.get((group, snapshot_id))
        return generation is not None and d.generation >= generation and settled(d)

    return check


def _rejoined(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Workers that joined again under a new member id: their session expired (a loaded machine)."""
    return sorted(name for name, member_id in after.items() if before.get(name, member_id) != member_id)


def session_ms(base_ms: int) -> int:
    """A session for this machine now: ``base_ms`` stretched by the load per core, up to 5 times (on a
    loaded laptop, two demo workers missed a 5 s session while a Spark round took 138 s)."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        per_core = 1.0
    return int(base_ms * min(5.0, max(1.0, per_core)))


def _start(address: str, groups: list[_Group], log: _Log) -> list[WorkerClient]:
    clients = []
    session = session_ms(20_000)  # nothing in act two waits for a session to expire
    for group in groups:
        assignor = group.strategy.assignor
        for i in range(3):
            name = f"{assignor}-w{i}"
            config = WorkerConfig(group_id=group.name, coordinators=(address,), client_id=name,
                                  assignors=(assignor,), session_timeout_ms=session, heartbeat_interval_ms=500,
                                  rebalance_timeout_ms=2 * session)
            reporter = ScenarioReporter(group.model, name, ReportPolicy(max_interval_s=0.3))
            clients.append(WorkerClient(config, _Quiet(), load_reporter=reporter,
                                        assignor_lookup=lambda n: _Watched(get_assignor(n), log)))
    for client in clients:
        client.start()
    return clients


def _round(number: int, refresher: _Refresher, admin: AdminClient, groups: list[_Group], log: _Log,
           ) -> dict[str, LoadSnapshot]:
    """One shedding interval: refresh, publish, and let each leader act on the new snapshot."""
    label = "the whole log, cold" if number == 1 else "warm: only what is new"
    snapshots = refresher.refresh(f"round {number}: {label}")
    for group in groups:
        snapshot = snapshots.get(group.name)
        if snapshot is None:
            raise DemoFailed(f"no snapshot published for {group.name}")
        if not log.verdict(group.name, snapshot.snapshot_id):
            print(f"   {group.strategy.assignor:<17} nothing to move on this snapshot", flush=True)
            continue
        # waited out: rebalances for other reasons (a worker that missed its session on a loaded
        # machine joins again) until the one whose leader assigned on this snapshot
        after = wait_for_group(admin, group.name, _assigned_on(log, group.name, snapshot.snapshot_id),
                               f"{group.name} rebalances with its leader running {group.strategy.assignor} on "
                               f"snapshot {snapshot.snapshot_id}", timeout=180)
        moved = sum(1 for n, ts in _assignment(after).items() for t in ts if t not in group.last.get(n, ()))
        if moved:
            group.moved_in.append(number)
        print(f"   {group.strategy.assignor:<17} rebalanced: generation {group.generation} -> "
              f"{after.generation}, {moved} task(s) moved", flush=True)
        rejoined = _rejoined(group.last_ids, _member_ids(after))
        if rejoined:
            print(f"   {'':<17} (meanwhile {', '.join(rejoined)} missed its session and joined again: "
                  f"this machine is loaded; the rebalance it caused is not the assignor's)", flush=True)
    return snapshots


def _outcome(group: _Group, first: LoadSnapshot, last: LoadSnapshot) -> Outcome:
    imbalance = group.model.imbalance
    assert imbalance is not None
    return Outcome(
        assignor=group.strategy.assignor, hot=imbalance.hot_member, foreign=imbalance.foreign_member,
        before_tasks=group.first, after_tasks=group.last,
        before=member_loads(first, group.first, group.ids), after=member_loads(last, group.last, group.last_ids),
        expect_move=group.strategy.expect_move, note=group.strategy.note, moved_in_rounds=group.moved_in,
    )


def act_two(address: str, admin: AdminClient, root: Path, samples: SampleLog, plot: Path, spark: Any) -> None:
    """Load-aware groups on one imbalance: rounds of snapshots and rebalances, then before/after and the check."""
    log = _Log()
    task_ids = tuple(f"bundle-{i:02d}" for i in range(TASKS_PER_GROUP))
    groups = [_Group(s, f"demo-{s.assignor}", LoadModel(task_ids), {}, {}, {}, []) for s in STRATEGIES]
    say(f"act two: load-aware assignment. One group per strategy ({len(groups)}), 3 workers each; "
        "every group gets the same imbalance")
    for group in groups:
        admin.put_tasks(group.name, task_ids)
    refresher = _Refresher(spark, root, address)
    clients = _start(address, groups, log)
    try:
        for group in groups:
            described = wait_for_group(admin, group.name, stable(3, TASKS_PER_GROUP), f"group {group.name} forms")
            group.ids = group.last_ids = _member_ids(described)
            group.first = group.last = _assignment(described)
            imbalance = group.model.arm(group.first)
        say("every group is Stable (sticky round-robin: no snapshot yet). The imbalance, seeded: "
            f"{_short(imbalance.hot_member)} runs {' and '.join(imbalance.hot_tasks)}, made "
            f"{' and '.join(f'{f:g}x' for f in HOT_FACTORS)} hotter; {_short(imbalance.foreign_member)} carries "
            f"{imbalance.foreign_cpu:g}% CPU of a process that is not a task. Workers report their tasks' msg/s "
            f"and {CPU_PER_MSG * 1000:g}% CPU per 1,000 msg/s of one core; a task's load moves with it")
        for group in groups:
            print(f"   {group.strategy.assignor:<17} {group.strategy.how}", flush=True)
        say(f"{ROUNDS} rounds: collect samples, run the Spark job (`groupcoord stats`), publish; each "
            f"leader asks its assignor every {RECHECK_S:g}s whether the new snapshot calls for moves")
        first: dict[str, LoadSnapshot] = {}
        last: dict[str, LoadSnapshot] = {}
        for number in range(1, ROUNDS + 1):
            time.sleep(2.5 if number == 1 else 1.5)  # the demo lets reports accumulate; no ordering rests on it
            samples.flush()
            for group in groups:  # what each member runs as these samples are folded in (all three back first)
                described = wait_for_group(admin, group.name, stable(3, TASKS_PER_GROUP),
                                           f"group {group.name} is Stable before round {number}", timeout=180)
                group.last, group.generation = _assignment(described), described.generation
                group.last_ids = _member_ids(described)
                if number == 1:  # "before" is what they run as the first samples are folded in
                    group.first, group.ids = group.last, group.last_ids
            last = _round(number, refresher, admin, groups, log)
            first = first or last
        _report(groups, first, last, plot, refresher.costs)
    finally:
        for client in clients:
            client.close()


def _short(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def _report(groups: list[_Group], first: dict[str, LoadSnapshot], last: dict[str, LoadSnapshot], plot: Path,
            costs: list[float]) -> None:
    outcomes = [_outcome(g, first[g.name], last[g.name]) for g in groups]
    say("load per member, first snapshot (before) -> last snapshot (after); CPU as the workers reported it, "
        "msg/s their tasks' averages (confirmed by each worker's own totals)")
    for outcome in outcomes:
        print(f"\n{outcome.assignor}", flush=True)
        for line in format_outcome(outcome):
            print(line, flush=True)
    written = plot_outcomes(outcomes, plot)
    say(f"picture: {written}" if written else f"picture skipped: {MISSING_HINT}")
    print("   Spark job per round: " + ", ".join(f"{c:.1f}s" for c in costs), flush=True)
    failed = {o.assignor: failures(o) for o in outcomes}
    failed = {name: found for name, found in failed.items() if found}
    if failed:
        say("self-check FAILED:")
        for found in failed.values():
            for problem in found:
                print("\n".join(textwrap.wrap(problem, 80, initial_indent="   - ", subsequent_indent="     ")))
        raise DemoFailed(f"self-check failed for {', '.join(failed)} (the reasons are above)")
    relieved = [o.assignor for o in outcomes if o.expect_move]
    say(f"self-check passed: {', '.join(relieved)} each moved tasks and the hot member's CPU and msg/s went down")
