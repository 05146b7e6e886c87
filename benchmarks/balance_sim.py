"""Simulate the pulsar-* assignors side by side: PIP-364's comparison table, as numbers.

A cluster of members (capacity in cores) runs tasks whose msg rate drifts (a random walk) and
jitters (short spikes). Each round is one shedding interval (1 simulated minute): workers
report, the statistics job's averages are updated (the seed's recurrence, 10/1000 samples),
the leader asks the assignor ``needs_rebalance`` and, if so (or when membership changed), runs
``assign``; the moves take effect at once, the load *reports* only next round (as in Pulsar,
where a placed bundle shows in its broker's load only after the next report).

Load model: a task with rate r msg/s in (and r out, one subscription) and 4 KiB messages costs
``r x CPU_PER_MSG`` percent of one core; a member's cpu usage is the sum over its tasks plus
any foreign process; cpu limit = 100 x cores. Utilization = cpu usage / limit; it is what
"load" means in the table (max/mean of utilization, spike-free, so jitter does not hide a
balanced cluster).

Scenarios: ``homogeneous`` (10 x 4 cores, skewed start), ``heterogeneous`` (2-8 cores, one 4-core
member with a foreign process using 60% of it), ``scale-out`` (6 members, 4 join at round 10),
``rolling-restart`` (10 members; from round 10 one leaves every 3 rounds and rejoins empty a
round later).

Columns (mean over seeds): ``rounds`` until max/mean <= 1.1 for good, counted from the last
membership change ("never" if it does not get there and stay); ``moved``: shedding moves;
``jitter``: moves caused by the spikes alone, i.e. ``moved`` minus the moves of the same run
(same seed, same drift) without spikes;
``peak%``: highest spike-free utilization of a member right after it received tasks;
``final``: max/mean over the last 10 rounds; ``osc``: tasks moved back to a member they had been moved off; ``foreign%``: the foreign
member's utilization over the last 20 rounds against the cluster mean.

    python benchmarks/balance_sim.py                 # 3 seeds x 60 rounds, plots in benchmarks/out/
    python benchmarks/balance_sim.py --quick         # smoke run (< 10 s)
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from assignors.base import AssignmentContext, MemberInfo, RebalanceCheck, TaskReplica, TaskSpec
from assignors.pulsar import (
    PulsarAvgAssignor,
    PulsarOverloadAssignor,
    PulsarThresholdAssignor,
    PulsarUniformAssignor,
)
from assignors.pulsar.data import TimeAverageMessageData
from assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats
from groupcoord.figures import LONG, SHORT, TASK_RATES, averaged, samples_column

MSG_SIZE = 4096
CPU_PER_MSG = 0.01  # percent of one core per msg/s (in + out handled together)
NIC_KBPS = 1_250_000.0  # 10 Gbit/s in KB/s: bandwidth never dominates here
ROUND_S = 60.0
BALANCED = 1.1

STRATEGIES: dict[str, Callable[[Callable[[], float]], object]] = {
    "pulsar-threshold": lambda clock: PulsarThresholdAssignor(clock=clock),
    "pulsar-uniform": lambda clock: PulsarUniformAssignor(clock=clock),
    "pulsar-avg": lambda clock: PulsarAvgAssignor(clock=clock),
    "pulsar-overload": lambda clock: PulsarOverloadAssignor(clock=clock),
    # Baseline: the same sticky assignor without a snapshot (sticky round-robin, no shedding).
    "sticky (no load)": lambda clock: PulsarUniformAssignor(clock=clock),
}


@dataclass
class Scenario:
    name: str
    capacities: dict[str, float]  # member -> cores
    foreign: dict[str, float] = field(default_factory=dict)  # member -> fraction of its cpu used by others
    joins: dict[int, list[str]] = field(default_factory=dict)  # round -> members joining
    leaves: dict[int, list[str]] = field(default_factory=dict)  # round -> members leaving
    skewed_start: bool = False
    initial_members: list[str] | None = None


def scenarios(rounds: int) -> list[Scenario]:
    ten = {f"m{i:02d}": 4.0 for i in range(10)}
    hetero = {f"m{i:02d}": c for i, c in enumerate([2, 2, 4, 4, 4, 4, 8, 8, 4, 4])}
    restart_leaves: dict[int, list[str]] = {}
    restart_joins: dict[int, list[str]] = {}
    r = 10
    for i in range(10):
        if r + 1 >= rounds:
            break
        restart_leaves[r] = [f"m{i:02d}"]
        restart_joins[r + 1] = [f"m{i:02d}"]
        r += 3
    return [
        Scenario("homogeneous", ten, skewed_start=True),
        Scenario("heterogeneous", hetero, foreign={"m09": 0.6}),
        Scenario(
            "scale-out",
            ten,
            joins={min(10, rounds // 3): [f"m{i:02d}" for i in range(6, 10)]},
            initial_members=[f"m{i:02d}" for i in range(6)],
        ),
        Scenario("rolling-restart", ten, leaves=restart_leaves, joins=restart_joins),
    ]


@dataclass
class TaskState:
    base: float
    spike_factor: float = 1.0
    spike_left: int = 0
    short: TimeAverageMessageData = field(default_factory=lambda: TimeAverageMessageData(10))
    long: TimeAverageMessageData = field(default_factory=lambda: TimeAverageMessageData(1000))

    def rate(self, spikes: bool = True) -> float:
        return self.base * (self.spike_factor if spikes else 1.0)


@dataclass
class Result:
    imbalance: list[float] = field(default_factory=list)
    moved: int = 0
    jitter_moves: float = 0.0
    peak: float = 0.0
    oscillations: int = 0
    rounds_to_balance: float = math.nan
    foreign_util: float = math.nan
    mean_util: float = math.nan
    foreign_series: list[float] = field(default_factory=list)


class Cluster:
    """Tasks, members and their true load; produces the snapshot the workers would report."""

    def __init__(self, scenario: Scenario, n_tasks: int, seed: int, *, jitter: bool = True) -> None:
        self.sc = scenario
        self.jitter = jitter
        self.rng = random.Random(seed)
        total_cores = sum(scenario.capacities.values())
        target_cpu = 0.5 * total_cores * 100  # about 50% busy on average
        raw = [self.rng.lognormvariate(0.0, 0.9) for _ in range(n_tasks)]
        scale = target_cpu / CPU_PER_MSG / sum(raw)
        self.tasks = {f"t{i:04d}": TaskState(base=x * scale) for i, x in enumerate(raw)}
        self.members = list(scenario.initial_members or scenario.capacities)
        self.owner: dict[str, str] = {}
        ids = sorted(self.tasks)
        if scenario.skewed_start:
            weights = [4 if i < 3 else 1 for i in range(len(self.members))]
            for t in ids:
                self.owner[t] = self.rng.choices(self.members, weights=weights)[0]
        else:
            for i, t in enumerate(ids):
                self.owner[t] = self.members[i % len(self.members)]

    def step_loads(self) -> None:
        for ts in self.tasks.values():
            ts.base = min(max(ts.base * math.exp(self.rng.gauss(0.0, 0.03)), 1.0), 1e6)
            # Draw the spike numbers every round, used or not, so a run without jitter sees the
            # very same drift as the run with it (the counterfactual behind the "jitter" column).
            roll, factor, length = self.rng.random(), self.rng.uniform(3.0, 5.0), self.rng.choice((1, 2))
            if ts.spike_left > 0:
                ts.spike_left -= 1
                if ts.spike_left == 0:
                    ts.spike_factor = 1.0
            elif roll < 0.02 and self.jitter:
                ts.spike_factor, ts.spike_left = factor, length

    def utilization(self, spikes: bool = True) -> dict[str, float]:
        cpu = {m: self.sc.foreign.get(m, 0.0) * self.sc.capacities[m] * 100 for m in self.members}
        for t, m in self.owner.items():
            if m in cpu:
                cpu[m] += self.tasks[t].rate(spikes) * CPU_PER_MSG
        return {m: cpu[m] / (self.sc.capacities[m] * 100) for m in self.members}

    def report(self, round_no: int) -> LoadSnapshot:
        """What the workers report and the statistics job computes this round."""
        tasks: dict[str, TaskLoadStats] = {}
        per_member_bytes: dict[str, float] = {m: 0.0 for m in self.members}
        for t, ts in self.tasks.items():
            r = ts.rate()
            ts.short.update(r * MSG_SIZE, r * MSG_SIZE, r, r)
            ts.long.update(r * MSG_SIZE, r * MSG_SIZE, r, r)
            m = self.owner.get(t, "")
            if m in per_member_bytes:
                per_member_bytes[m] += r * MSG_SIZE
            averages = {SHORT: ts.short, LONG: ts.long}
            tasks[t] = TaskLoadStats(
                task_id=t,
                worker_id=m,
                **{samples_column(term): avg.num_samples for term, avg in averages.items()},
                **{
                    name: getattr(avg, rate)
                    for term, avg in averages.items()
                    for rate, name in zip(TASK_RATES, averaged(term), strict=True)
                },
                topics=4,
                producers=2,
                consumers=2,
            )
        util = self.utilization()
        workers = {
            m: WorkerLoadStats(
                worker_id=m,
                # A probe never reports more than the whole machine, however long the queues get.
                cpu_usage=min(util[m], 1.0) * self.sc.capacities[m] * 100,
                cpu_limit=self.sc.capacities[m] * 100,
                memory_usage=1024.0,
                memory_limit=4096.0,
                bandwidth_in_usage=per_member_bytes[m] / 1024,
                bandwidth_in_limit=NIC_KBPS,
                bandwidth_out_usage=per_member_bytes[m] / 1024,
                bandwidth_out_limit=NIC_KBPS,
                num_tasks=sum(1 for o in self.owner.values() if o == m),
                ts_ms=int(round_no * ROUND_S * 1000),
            )
            for m in self.members
        }
        return LoadSnapshot(
            group_id="sim",
            snapshot_id=f"r{round_no}",
            created_ms=int(round_no * ROUND_S * 1000),
            tasks=tasks,
            workers=workers,
        )


def run(scenario: Scenario, strategy: str, seed: int, rounds: int, n_tasks: int, *, jitter: bool = True) -> Result:
    cluster = Cluster(scenario, n_tasks, seed, jitter=jitter)
    now = [0.0]
    assignor = STRATEGIES[strategy](lambda: now[0])
    specs = tuple(TaskSpec(t) for t in sorted(cluster.tasks))
    res = Result()
    history: dict[str, list[tuple[str, str]]] = {}
    last_change = 0
    generation = 0
    for r in range(rounds):
        now[0] = r * ROUND_S
        changed = r == 0
        for m in scenario.leaves.get(r, []):
            if m in cluster.members:
                cluster.members.remove(m)
                changed = True
        cluster.step_loads()
        snapshot = cluster.report(r)  # measured before this round's joins: a joiner has no report yet
        for m in scenario.joins.get(r, []):
            if m not in cluster.members:
                cluster.members.append(m)
                changed = True
        if changed:
            last_change = r
        owned: dict[str, list[TaskReplica]] = {m: [] for m in cluster.members}
        for t, m in cluster.owner.items():
            if m in owned:
                owned[m].append(TaskReplica(t))
        context = AssignmentContext(
            group_id="sim",
            generation=generation,
            members=tuple(MemberInfo(m, owned=tuple(owned[m]), owned_generation=generation) for m in cluster.members),
            tasks=specs,
            load_snapshot=snapshot if strategy != "sticky (no load)" else None,
            rng=random.Random(seed * 100003 + r),
        )
        if changed or (isinstance(assignor, RebalanceCheck) and assignor.needs_rebalance(context)):
            generation += 1
            before_util = cluster.utilization(spikes=False)
            previous = dict(cluster.owner)
            assignment = assignor.assign(context)  # type: ignore[attr-defined]
            cluster.owner = {rep.task_id: m for m, reps in assignment.members.items() for rep in reps}
            receivers: set[str] = set()
            for t, m in cluster.owner.items():
                src = previous.get(t)
                if src == m:
                    continue
                receivers.add(m)
                if src in before_util:  # a voluntary move (the old owner is still there)
                    res.moved += 1
                    if (m, src) in history.get(t, []):
                        res.oscillations += 1
                    history.setdefault(t, []).append((src, m))
            after = cluster.utilization(spikes=False)
            for m in receivers:
                res.peak = max(res.peak, after[m])
        util = cluster.utilization(spikes=False)
        mean = sum(util.values()) / len(util)
        res.imbalance.append(max(util.values()) / mean)
        for m in scenario.foreign:
            if m in util:
                res.foreign_series.append(util[m])
    # rounds to balance: from the last membership change, the first round from which it stays <= 1.1
    settled = None
    for r in range(rounds - 1, last_change - 1, -1):
        if res.imbalance[r] <= BALANCED:
            settled = r
        else:
            break
    res.rounds_to_balance = math.nan if settled is None else float(settled - last_change)
    if scenario.foreign:
        tail = res.foreign_series[-20:]
        res.foreign_util = sum(tail) / len(tail)
        util = cluster.utilization(spikes=False)
        res.mean_util = sum(util.values()) / len(util)
    return res


def fmt_rounds(values: list[float]) -> str:
    ok = [v for v in values if not math.isnan(v)]
    if not ok:
        return "never"
    text = f"{sum(ok) / len(ok):.1f}"
    return text if len(ok) == len(values) else f"{text} ({len(ok)}/{len(values)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 14 rounds, 50 tasks: a smoke run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.quick:
        args.seeds, args.rounds, args.tasks = 1, 14, 50
    started = time.perf_counter()
    all_results: dict[str, dict[str, list[Result]]] = {}
    header = (
        f"{'scenario':<16}{'strategy':<18}{'rounds':>12}{'final':>7}{'moved':>8}{'jitter':>8}{'peak%':>7}{'osc':>6}"
        f"{'foreign%':>16}"
    )
    print(header)
    print("-" * len(header))
    for sc in scenarios(args.rounds):
        all_results[sc.name] = {}
        for strategy in STRATEGIES:
            results = [run(sc, strategy, seed, args.rounds, args.tasks) for seed in range(1, args.seeds + 1)]
            if strategy != "sticky (no load)":
                for seed, res in enumerate(results, start=1):
                    calm = run(sc, strategy, seed, args.rounds, args.tasks, jitter=False)
                    res.jitter_moves = res.moved - calm.moved
            all_results[sc.name][strategy] = results
            n = len(results)
            foreign = "-"
            if sc.foreign:
                fu = sum(x.foreign_util for x in results) / n * 100
                mu = sum(x.mean_util for x in results) / n * 100
                foreign = f"{fu:.0f} (mean {mu:.0f})"
            print(
                f"{sc.name:<16}{strategy:<18}{fmt_rounds([x.rounds_to_balance for x in results]):>12}"
                f"{sum(sum(x.imbalance[-10:]) / len(x.imbalance[-10:]) for x in results) / n:>7.2f}"
                f"{sum(x.moved for x in results) / n:>8.1f}{sum(x.jitter_moves for x in results) / n:>8.1f}"
                f"{sum(x.peak for x in results) / n * 100:>7.0f}{sum(x.oscillations for x in results) / n:>6.1f}"
                f"{foreign:>16}"
            )
    print(
        f"\n{args.seeds} seed(s) x {args.rounds} rounds x {args.tasks} tasks in {time.perf_counter() - started:.1f} s"
    )
    if not args.no_plots:
        save_plots(all_results, args.out)
        print(f"plots in {args.out}")
    return 0


def save_plots(all_results: dict[str, dict[str, list[Result]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    for scenario, by_strategy in all_results.items():
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for strategy, results in by_strategy.items():
            series = results[0].imbalance
            ax.plot(range(len(series)), series, label=strategy)
        ax.axhline(BALANCED, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("round (shedding interval)")
        ax.set_ylabel("max / mean utilization (seed 1)")
        ax.set_title(f"{scenario}: imbalance over time")
        ax.legend(loc="upper right")
        fig.tight_layout()
        fig.savefig(out / f"balance_{scenario}.png", dpi=100)
        plt.close(fig)
        if any(r.foreign_series for rs in by_strategy.values() for r in rs):
            fig, ax = plt.subplots(figsize=(8, 4.5))
            for strategy, results in by_strategy.items():
                ax.plot([u * 100 for u in results[0].foreign_series], label=strategy)
            ax.set_xlabel("round")
            ax.set_ylabel("utilization % of the member with a foreign process")
            ax.set_title(f"{scenario}: the foreign-process member")
            ax.legend(loc="upper right")
            fig.tight_layout()
            fig.savefig(out / f"foreign_{scenario}.png", dpi=100)
            plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
