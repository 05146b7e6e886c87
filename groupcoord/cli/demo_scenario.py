"""Act two's load: synthetic and deterministic, and a task's load goes wherever the task goes.

Measured load would not do here: every act-two worker lives in the demo's one process, so
psutil would give each the same CPU, and no shedder would ever have anything to do. Instead
each task gets a fixed message rate from a seeded random source, and a worker reports what the
tasks it runs *now* add up to: a task that moves takes its load along, and the next snapshot
shows it on its new owner. CPU is charged per message, as a real service's would be.

The imbalance is made once the group first stands (``arm``): the hot member's two first tasks
become 12x and 10x hotter, and another member carries a foreign CPU load, a process that is
not a task. Only resource-based strategies see that one; message-rate ones do not.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from groupcoord.loadstats.report_policy import ReportPolicy
from groupcoord.loadstats.samples import LoadReport, ResourceUsage, TaskLoad
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import report_to_pb

if TYPE_CHECKING:  # pragma: no cover
    from groupcoord.worker.client import WorkerClient

__all__ = ["CPU_LIMIT", "CPU_PER_MSG", "HOT_FACTORS", "Imbalance", "LoadModel", "ScenarioReporter"]

SEED = 18
CPU_PER_MSG = 0.01
"""percent of a core per msg/s in (1,000 msg/s cost 10% of a core)."""
CPU_LIMIT = 100.0
"""each demo worker's CPU budget: one core (percent)."""
MSG_BYTES = 2048
HOT_FACTORS = (12.0, 10.0)
"""how much hotter the hot member's first tasks (sorted) become."""
FOREIGN_CPU = 30.0
"""percent of a core that a process beside one member uses."""
MEMORY = ResourceUsage(256.0, 4096.0)


@dataclass(frozen=True)
class Imbalance:
    """Who is hot, with which tasks, and who carries the foreign load (worker names)."""

    hot_member: str
    hot_tasks: tuple[str, ...]
    foreign_member: str
    foreign_cpu: float = FOREIGN_CPU


@dataclass
class LoadModel:
    """Per-task message rates (seeded) and, once armed, the imbalance; shared by a group's workers."""

    task_ids: tuple[str, ...]
    seed: int = SEED
    rates: dict[str, float] = field(init=False)
    imbalance: Imbalance | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        self.rates = {t: rng.uniform(300.0, 700.0) for t in self.task_ids}
        self._lock = threading.Lock()

    def arm(self, assignment: Mapping[str, Iterable[str]]) -> Imbalance:
        """Make the first member (by name) hot and the member with the fewest msg/s carry the foreign load."""
        owned = {name: sorted(tasks) for name, tasks in assignment.items()}
        hot = min(owned)
        hot_tasks = tuple(owned[hot][: len(HOT_FACTORS)])
        with self._lock:
            for task, factor in zip(hot_tasks, HOT_FACTORS, strict=False):
                self.rates[task] *= factor
            cold = [m for m in sorted(owned) if m != hot]
            foreign = min(cold, key=lambda m: (sum(self.rates[t] for t in owned[m]), m))
            self.imbalance = Imbalance(hot, hot_tasks, foreign)
        return self.imbalance

    def task_load(self, task_id: str) -> TaskLoad:
        rate = self.rates[task_id]
        return TaskLoad(task_id=task_id, msg_rate_in=rate, msg_rate_out=rate, msg_throughput_in=rate * MSG_BYTES,
                        msg_throughput_out=rate * MSG_BYTES, topics=1, producers=1, consumers=1)

    def cpu(self, member: str, task_ids: Iterable[str]) -> float:
        """Percent of a core: the member's tasks, plus the foreign load if it is that member."""
        foreign = self.imbalance.foreign_cpu if self.imbalance and self.imbalance.foreign_member == member else 0.0
        return foreign + sum(self.rates[t] * CPU_PER_MSG for t in task_ids)

    def report(self, member: str, task_ids: Iterable[str]) -> LoadReport | None:
        """What ``member`` running ``task_ids`` reports now; None before ``arm`` (nothing to report yet)."""
        if self.imbalance is None:
            return None
        ids = sorted(task_ids)
        tasks = tuple(self.task_load(t) for t in ids)
        throughput = sum(t.msg_throughput_in for t in tasks) / 1024
        return LoadReport(ts_ms=time.time_ns() // 1_000_000, cpu=ResourceUsage(self.cpu(member, ids), CPU_LIMIT),
                          memory=MEMORY, bandwidth_in=ResourceUsage(throughput, 0.0),
                          bandwidth_out=ResourceUsage(throughput, 0.0), tasks=tasks)


class ScenarioReporter:
    """``WorkerClient(load_reporter=...)``: the model's report for this worker's tasks, when the policy says so."""

    def __init__(self, model: LoadModel, name: str, policy: ReportPolicy) -> None:
        self.model = model
        self.name = name
        self.policy = policy

    def __call__(self, client: WorkerClient) -> pb.LoadReport | None:
        report = self.model.report(self.name, (t.task_id for t in client.assigned_tasks))
        if report is None or not self.policy.should_send(report):
            return None
        self.policy.sent(report)
        return report_to_pb(report)
