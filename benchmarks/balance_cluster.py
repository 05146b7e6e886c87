"""The simulated cluster behind ``balance_sim.py``: scenarios, tasks, members and their true load.

A cluster of members (capacity in cores) runs tasks whose msg rate drifts (a random walk) and
jitters (short spikes). Load model: a task with rate r msg/s in (and r out, one subscription)
and 4 KiB messages costs ``r x CPU_PER_MSG`` percent of one core; a member's cpu usage is the
sum over its tasks plus any foreign process; cpu limit = 100 x cores. Utilization = cpu usage /
limit. ``Cluster.report`` builds the snapshot the workers and the statistics job would produce
(the seed's 10/1000-sample averages); the true, spike-free utilization is what the simulator scores.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from groupcoord.assignors.pulsar.data import TimeAverageMessageData
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats
from groupcoord.figures import LONG, SHORT, TASK_RATES, averaged, samples_column

__all__ = ["CPU_PER_MSG", "MSG_SIZE", "NIC_KBPS", "ROUND_S", "Cluster", "Scenario", "TaskState", "scenarios"]

MSG_SIZE = 4096
CPU_PER_MSG = 0.01  # percent of one core per msg/s (in + out handled together)
NIC_KBPS = 1_250_000.0  # 10 Gbit/s in KB/s: bandwidth never dominates here
ROUND_S = 60.0


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
        self.spikes = 0  # spikes started so far (the jitter column is per 100 of them)
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
                self.spikes += 1

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


