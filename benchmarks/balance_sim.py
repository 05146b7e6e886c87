"""Simulate the load-aware assignors side by side: every Pulsar strategy and ``balanced``.

The cluster model (scenarios, drift, spikes, the snapshot) is in ``balance_cluster.py``. Each
round is one shedding interval (1 simulated minute): workers report, the statistics job's
averages are updated (10/1000 samples), the leader asks the assignor ``needs_rebalance`` and, if
so (or when membership changed), runs ``assign``; the moves take effect at once, the load
*reports* only next round. With ``--protocol cooperative`` the answer goes through
``cooperative_step`` (what moves is held back), and the members re-join at once: the next
generation, on the same snapshot, places what was held back.

Scenarios: ``homogeneous`` (10 x 4 cores, skewed start), ``heterogeneous`` (2-8 cores, one 4-core
member with a foreign process using 60% of it), ``scale-out`` (6 members, 4 join at round 10),
``rolling-restart`` (10 members; from round 10 one leaves every 3 rounds and rejoins empty a
round later).

Columns (mean over seeds; "load" is spike-free utilization, imbalance is max/mean of it):
``rounds`` until imbalance <= 1.1 for good, from the last membership change; ``settle``: per
seed the worst, over every membership change (round 0 included), of the rounds from the change
to the first balanced round, shown as mean/worst over seeds ("never(k/n)": k seeds never get
there); ``relapse``: rounds above 1.1 after a change had settled, before the next change; ``final``: imbalance over the last 10 rounds;
``moved``: voluntary moves (the old owner still a member); ``fewest``: the sum, over every
rebalance, of a lower bound on the moves reaching the balance that rebalance reached — each
member must shed at least as many of its heaviest tasks as bring it down to the new maximum, and
(when no departed member's tasks are free to place) each must receive at least as many of the
largest tasks as lift it to the new minimum; ``x``: moved / fewest; ``jit/100``: moves caused
by spikes alone (``moved`` minus the moves of the same seed and drift without spikes) per 100
spikes; ``peak%``: highest utilization of a member right after it received tasks; ``osc``:
tasks moved back to a member they had been moved off; ``foreign%``: the foreign-process member
over the last 20 rounds against the cluster mean.

    python benchmarks/balance_sim.py                        # 5 seeds x 60 rounds, plots in benchmarks/out/
    python benchmarks/balance_sim.py --protocol cooperative # the same through cooperative_step
    python benchmarks/balance_sim.py --quick                # smoke run
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from balance_cluster import CPU_PER_MSG, Cluster, Scenario, scenarios

from groupcoord.assignors.balanced import BalancedAssignor
from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, RebalanceCheck, TaskReplica, TaskSpec
from groupcoord.assignors.cooperative import COOPERATIVE, EAGER, cooperative_step
from groupcoord.assignors.pulsar import (
    PulsarAvgAssignor,
    PulsarOverloadAssignor,
    PulsarThresholdAssignor,
    PulsarTransferAssignor,
    PulsarUniformAssignor,
)
from groupcoord.plots import MISSING_HINT, line_chart, pyplot

BALANCED = 1.1
NO_LOAD = "sticky (no load)"

STRATEGIES: dict[str, Callable[[Callable[[], float]], object]] = {
    "pulsar-threshold": lambda clock: PulsarThresholdAssignor(clock=clock),
    "pulsar-uniform": lambda clock: PulsarUniformAssignor(clock=clock),
    "pulsar-avg": lambda clock: PulsarAvgAssignor(clock=clock),
    "pulsar-overload": lambda clock: PulsarOverloadAssignor(clock=clock),
    "pulsar-transfer": lambda clock: PulsarTransferAssignor(clock=clock),
    "balanced": lambda clock: BalancedAssignor(clock=clock),
    # Baseline: a sticky assignor without a snapshot (sticky round-robin, no shedding).
    NO_LOAD: lambda clock: PulsarUniformAssignor(clock=clock),
}


@dataclass
class Result:
    imbalance: list[float] = field(default_factory=list)
    changes: list[int] = field(default_factory=list)
    moved: int = 0
    fewest: int = 0
    jitter_moves: float = 0.0
    spikes: int = 0
    peak: float = 0.0
    oscillations: int = 0
    rounds_to_balance: float = math.nan
    foreign_util: float = math.nan
    mean_util: float = math.nan
    foreign_series: list[float] = field(default_factory=list)

    def settle(self) -> float:
        """Worst rounds from a membership change to the first balanced round (nan: never)."""
        worst = 0.0
        for c in self.changes:
            first = next((r for r in range(c, len(self.imbalance)) if self.imbalance[r] <= BALANCED), None)
            if first is None:
                return math.nan
            worst = max(worst, float(first - c))
        return worst

    def relapses(self) -> int:
        """Rounds above 1.1 after a change had settled, before the next change."""
        bounds = [*self.changes, len(self.imbalance)]
        count = 0
        for c, end in itertools.pairwise(bounds):
            first = next((r for r in range(c, end) if self.imbalance[r] <= BALANCED), None)
            if first is not None:
                count += sum(1 for r in range(first, end) if self.imbalance[r] > BALANCED)
        return count


def fewest_moves(cluster: Cluster, before: dict[str, str], present_before: set[str]) -> int:
    """A lower bound on the moves that reach the balance ``cluster.owner`` has, from ``before``."""
    caps, foreign = cluster.sc.capacities, cluster.sc.foreign
    after = cluster.utilization(spikes=False)
    high, low = max(after.values()), min(after.values())
    load = {t: ts.rate(False) * CPU_PER_MSG for t, ts in cluster.tasks.items()}
    mine: dict[str, list[float]] = {m: [] for m in cluster.members}
    free = False
    for t, m in before.items():
        if m in mine and m in present_before:
            mine[m].append(load[t])
        else:
            free = True
    shed = gain = 0
    largest = sorted(load.values(), reverse=True)
    for m, tasks in mine.items():
        cap = caps[m] * 100
        used = foreign.get(m, 0.0) * cap + sum(tasks)
        for x in sorted(tasks, reverse=True):
            if used / cap <= high + 1e-12:
                break
            used -= x
            shed += 1
        used = foreign.get(m, 0.0) * cap + sum(tasks)
        for x in largest:
            if used / cap >= low - 1e-12:
                break
            used += x
            gain += 1
    return max(shed, 0 if free else gain)


def _context(cluster: Cluster, generation: int, specs: tuple[TaskSpec, ...], snapshot: object, rng: random.Random,
             protocol: str) -> AssignmentContext:
    owned: dict[str, list[TaskReplica]] = {m: [] for m in cluster.members}
    for t, m in cluster.owner.items():
        if m in owned:
            owned[m].append(TaskReplica(t))
    return AssignmentContext(
        group_id="sim",
        generation=generation,
        members=tuple(MemberInfo(m, owned=tuple(owned[m]), owned_generation=generation) for m in cluster.members),
        tasks=specs,
        load_snapshot=snapshot,  # type: ignore[arg-type]
        rng=rng,
        rebalance_protocol=protocol,
    )


def _owners(assignment: Assignment) -> dict[str, str]:
    return {rep.task_id: m for m, reps in assignment.members.items() for rep in reps}


def run(scenario: Scenario, strategy: str, seed: int, rounds: int, n_tasks: int, *, jitter: bool = True,
        protocol: str = EAGER) -> Result:
    cluster = Cluster(scenario, n_tasks, seed, jitter=jitter)
    now = [0.0]
    assignor = STRATEGIES[strategy](lambda: now[0])
    specs = tuple(TaskSpec(t) for t in sorted(cluster.tasks))
    res = Result()
    history: dict[str, list[tuple[str, str]]] = {}
    last_change = 0
    generation = 0
    for r in range(rounds):
        now[0] = r * 60.0
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
            res.changes.append(r)
        load = snapshot if strategy != NO_LOAD else None
        rng = random.Random(seed * 100003 + r)
        context = _context(cluster, generation, specs, load, rng, protocol)
        if changed or (isinstance(assignor, RebalanceCheck) and assignor.needs_rebalance(context)):
            before_util = cluster.utilization(spikes=False)
            previous = dict(cluster.owner)
            for _ in range(3):  # cooperative: a second generation places what the first held back
                generation += 1
                context = _context(cluster, generation, specs, load, rng, protocol)
                assignment = cooperative_step(context, assignor.assign(context))  # type: ignore[attr-defined]
                cluster.owner = _owners(assignment)
                if len(cluster.owner) == len(specs):
                    break
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
            res.fewest += fewest_moves(cluster, previous, set(before_util))
        util = cluster.utilization(spikes=False)
        mean = sum(util.values()) / len(util)
        res.imbalance.append(max(util.values()) / mean)
        for m in scenario.foreign:
            if m in util:
                res.foreign_series.append(util[m])
    res.spikes = cluster.spikes
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


def fmt_worst(values: list[float]) -> str:
    """Mean and worst over seeds ("never" if a seed never gets there)."""
    if any(math.isnan(v) for v in values):
        ok = sum(1 for v in values if not math.isnan(v))
        return f"never({len(values) - ok}/{len(values)})"
    return f"{sum(values) / len(values):.1f}/{max(values):.0f}"


def fmt_rounds(values: list[float]) -> str:
    ok = [v for v in values if not math.isnan(v)]
    if not ok:
        return "never"
    text = f"{sum(ok) / len(ok):.1f}" if len(ok) == len(values) else f"{sum(ok) / len(ok):.1f}({len(ok)}/{len(values)})"
    return text


HEADER = (
    f"{'scenario':<16}{'strategy':<18}{'rounds':>11}{'settle':>11}{'relapse':>8}{'final':>6}{'moved':>7}"
    f"{'fewest':>7}{'x':>6}{'jit/100':>8}{'peak%':>6}{'osc':>5}{'foreign%':>15}"
)


def row(sc: Scenario, strategy: str, results: list[Result]) -> str:
    n = len(results)
    foreign = "-"
    if sc.foreign:
        fu = sum(x.foreign_util for x in results) / n * 100
        mu = sum(x.mean_util for x in results) / n * 100
        foreign = f"{fu:.0f} (mean {mu:.0f})"
    moved, fewest = sum(x.moved for x in results) / n, sum(x.fewest for x in results) / n
    spikes = sum(x.spikes for x in results)
    jitter = sum(x.jitter_moves for x in results) / spikes * 100 if spikes else 0.0
    ratio = f"{moved / fewest:.2f}" if fewest else "-"
    return (
        f"{sc.name:<16}{strategy:<18}{fmt_rounds([x.rounds_to_balance for x in results]):>11}"
        f"{fmt_worst([x.settle() for x in results]):>11}{sum(x.relapses() for x in results) / n:>8.1f}"
        f"{sum(sum(x.imbalance[-10:]) / len(x.imbalance[-10:]) for x in results) / n:>6.2f}"
        f"{moved:>7.1f}{fewest:>7.1f}{ratio:>6}{jitter:>8.2f}"
        f"{sum(x.peak for x in results) / n * 100:>6.0f}{sum(x.oscillations for x in results) / n:>5.1f}{foreign:>15}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 14 rounds, 50 tasks: a smoke run")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=1, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--protocol", choices=(EAGER, COOPERATIVE), default=EAGER)
    parser.add_argument("--only", default="", help="comma-separated strategies (default: all)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.quick:
        args.seeds, args.rounds, args.tasks = 1, 14, 50
    chosen = [s for s in args.only.split(",") if s] or list(STRATEGIES)
    started = time.perf_counter()
    all_results: dict[str, dict[str, list[Result]]] = {}
    print(f"protocol: {args.protocol}")
    print(HEADER)
    print("-" * len(HEADER))
    for sc in scenarios(args.rounds):
        all_results[sc.name] = {}
        for strategy in chosen:
            seeds = range(args.first_seed, args.first_seed + args.seeds)
            results = [run(sc, strategy, s, args.rounds, args.tasks, protocol=args.protocol) for s in seeds]
            if strategy != NO_LOAD:
                for seed, res in zip(seeds, results, strict=True):
                    calm = run(sc, strategy, seed, args.rounds, args.tasks, jitter=False, protocol=args.protocol)
                    res.jitter_moves = res.moved - calm.moved
            all_results[sc.name][strategy] = results
            print(row(sc, strategy, results), flush=True)
    print(
        f"\n{args.seeds} seed(s) x {args.rounds} rounds x {args.tasks} tasks in {time.perf_counter() - started:.1f} s"
    )
    if not args.no_plots:
        if save_plots(all_results, args.out, suffix="" if args.protocol == EAGER else f"_{args.protocol}"):
            print(f"plots in {args.out}")
        else:
            print(f"plots skipped: {MISSING_HINT}")
    return 0


def save_plots(all_results: dict[str, dict[str, list[Result]]], out: Path, suffix: str = "") -> bool:
    """Write the charts (``groupcoord.plots``); False when matplotlib is missing."""
    if pyplot() is None:
        return False
    for scenario, by_strategy in all_results.items():
        line_chart(
            out / f"balance_{scenario}{suffix}.png",
            {strategy: results[0].imbalance for strategy, results in by_strategy.items()},
            title=f"{scenario}: imbalance over time",
            xlabel="round (shedding interval)",
            ylabel="max / mean utilization (seed 1)",
            hline=BALANCED,
            emphasize="balanced",
        )
        if any(r.foreign_series for rs in by_strategy.values() for r in rs):
            line_chart(
                out / f"foreign_{scenario}{suffix}.png",
                {strategy: [u * 100 for u in results[0].foreign_series] for strategy, results in by_strategy.items()},
                title=f"{scenario}: the foreign-process member",
                xlabel="round",
                ylabel="utilization % of the member with a foreign process",
            )
    return True


if __name__ == "__main__":
    sys.exit(main())
