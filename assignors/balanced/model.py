"""What ``balanced`` believes about load: a spike-resistant estimate of every task and member.

The statistics job reports per task a short-term average over 10 samples (the seed's
recurrence ``avg_n = ((n - 1) avg_{n-1} + x) / n``, n capped at 10) and per member its current
resource usage. A one-minute spike of 4x lifts that average by 30% for ten minutes, which is
what makes Pulsar's shedders move tasks on spikes (PIP-364's jitter). So the estimator:

1. **recovers each sample** from two consecutive snapshots, ``x = n avg_n - (n - 1) avg_{n-1}``
   (exact when one sample was added, which the long-term sample count tells);
2. keeps the last ``window`` samples per task and averages those that are not spikes (above
   ``SPIKE`` x the window's smallest: spikes only go up) — a spike never moves the estimate, a
   steady drift does within a few samples;
3. fits **cpu per msg/s** across members (the median of cpu / msg rate over members not at their
   limit) and gives each member a **background** load ``cpu - k x its tasks' rate`` (a foreign
   process, the runtime), itself a median over the window; a member at its cpu limit tells only
   a lower bound, used until it reports below the limit;
4. a member's **utilization** is ``(background + k x its tasks' estimated rates) / cpu limit``.

Without a snapshot (or for a task never reported) the task's ``weight`` stands in for its rate
and a member's ``capacity`` for its limit. A member that has never reported gets the median
limit of those that have and no background. Pure bookkeeping, no I/O.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from groupcoord.assignors.base import MemberInfo, TaskSpec
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats

__all__ = ["LoadEstimator", "LoadView"]

CAPPED = 0.98
"""A member reporting at least this share of its cpu limit is saturated: it does not fit ``k``."""


@dataclass
class LoadView:
    """One round's estimate: per task its load and per member its capacity and background,
    all in the unit of the member's cpu limit (percent of one core)."""

    task_load: dict[str, float] = field(default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)
    background: dict[str, float] = field(default_factory=dict)

    def utilization(self, member: str, tasks: Iterable[str]) -> float:
        load = self.background.get(member, 0.0) + sum(self.task_load.get(t, 0.0) for t in tasks)
        return load / self.capacity[member]


@dataclass(slots=True)
class _TaskHistory:
    short_avg: float
    short_n: int
    long_n: int
    samples: deque[float]


SPIKE = 1.5
"""A sample above this x the smallest of its window is a spike (spikes only go up; a drift of a
few percent per sample never gets there within a window)."""


def _robust(samples: deque[float]) -> float:
    """The mean of the window's samples that are not spikes."""
    if len(samples) == 1:  # every task of the first snapshot a leader sees (100,000 at scale)
        return 0.0 + samples[0]  # what ``sum`` / 1 gives, to the bit
    low = min(samples)
    kept = [x for x in samples if x <= SPIKE * low] if low > 0 else list(samples)
    return sum(kept) / len(kept)


def _rate(row: TaskLoadStats) -> float:
    return row.short_msg_rate_in + row.short_msg_rate_out


class LoadEstimator:
    """Keeps the per-task sample windows and per-member background windows between snapshots."""

    def __init__(self, window: int = 5) -> None:
        self.window = window
        self._tasks: dict[str, _TaskHistory] = {}
        self._background: dict[str, deque[float]] = {}
        self._floor: dict[str, float] = {}
        self._limit: dict[str, float] = {}
        self._k = 0.0
        self._seen: object = None

    def observe(self, snapshot: LoadSnapshot) -> None:
        """Take in one snapshot (a snapshot seen before is ignored)."""
        key = (snapshot.snapshot_id, snapshot.created_ms)
        if key == self._seen:
            return
        self._seen = key
        # one pass over the tasks (100,000 at scale): each one's newest sample, summed per worker
        rate_of: dict[str, float] = {}
        observe_task, rate_so_far = self._observe_task, rate_of.get
        tasks, size = self._tasks, self.window
        first = not tasks  # the first snapshot seen: every task is new (``_observe_task``'s first sight, inlined)
        for task_id, row in snapshot.tasks.items():
            if first:
                sample = row.short_msg_rate_in + row.short_msg_rate_out  # ``_rate``, inlined
                tasks[task_id] = _TaskHistory(sample, row.short_samples, row.long_samples, deque((sample,), size))
            else:
                sample = observe_task(task_id, row)
            wid = row.worker_id
            if wid:
                rate_of[wid] = rate_so_far(wid, 0.0) + sample
        for gone in self._tasks.keys() - snapshot.tasks.keys():
            del self._tasks[gone]
        ratios = []
        for member, worker in sorted(snapshot.workers.items()):
            if worker.cpu_limit > 0:
                self._limit[member] = worker.cpu_limit
                rate = rate_of.get(member, 0.0)
                if rate > 0 and worker.cpu_usage < CAPPED * worker.cpu_limit:
                    ratios.append(worker.cpu_usage / rate)
        if ratios:
            self._k = statistics.median(ratios)
        for member, worker in sorted(snapshot.workers.items()):
            if worker.cpu_limit <= 0 or self._k <= 0:
                continue
            extra = max(0.0, worker.cpu_usage - self._k * rate_of.get(member, 0.0))
            window = self._background.setdefault(member, deque(maxlen=self.window))
            if worker.cpu_usage < CAPPED * worker.cpu_limit:
                window.append(extra)
            elif not window:  # saturated: ``extra`` is only a lower bound; keep it until a real figure comes
                self._floor[member] = extra

    def _observe_task(self, task_id: str, row: TaskLoadStats) -> float:
        """Record the task's newest sample (recovered from its average); returns that sample."""
        avg, n, long_n = _rate(row), row.short_samples, row.long_samples
        seen = self._tasks.get(task_id)
        if seen is not None and long_n == seen.long_n and avg == seen.short_avg:
            return seen.samples[-1]  # the same report again: no new sample
        # One sample more: the long-term count moved by one, or stays at its cap with a new average.
        one_more = seen is not None and long_n in (seen.long_n + 1, seen.long_n)
        if seen is not None and one_more and n >= 1:
            sample = max(0.0, n * avg - (n - 1) * seen.short_avg)
            seen.short_avg, seen.short_n, seen.long_n = avg, n, long_n
        else:  # first sight, or samples were missed: the average is the best we have
            sample = avg
            seen = self._tasks[task_id] = _TaskHistory(avg, n, long_n, deque(maxlen=self.window))
        seen.samples.append(sample)
        return sample

    @property
    def seen(self) -> object:
        """The key, ``(snapshot_id, created_ms)``, of the last snapshot taken in (``None``: none yet)."""
        return self._seen

    def by_load(self, use_load: bool) -> bool:
        """Whether a view asked with ``use_load`` estimates from the snapshots (else weights and capacities)."""
        return use_load and self._k > 0

    def view(self, members: Iterable[MemberInfo], tasks: Iterable[TaskSpec], *, use_load: bool) -> LoadView:
        """The estimate for these members and tasks (``use_load=False``: weights and capacities only)."""
        members, tasks = list(members), list(tasks)
        out = LoadView()
        if not self.by_load(use_load):
            for task in tasks:
                out.task_load[task.task_id] = task.weight
            out.capacity = self.capacities(members, by_load=False)
            return out
        k, histories = self._k, self._tasks
        # a window of one sample (every task of the first snapshot a leader sees) inlined: 100,000 calls
        loads = {t.task_id: k * (0.0 + seen.samples[0] if len(seen.samples) == 1 else _robust(seen.samples))
                 for t in tasks if (seen := histories.get(t.task_id)) is not None}
        typical = statistics.median(loads.values()) if loads else 1.0
        for task in tasks:
            out.task_load[task.task_id] = loads.get(task.task_id, typical)
        out.capacity = self.capacities(members, by_load=True)
        for member in members:
            out.background[member.member_id] = self.background_of(member.member_id)
        return out

    def capacities(self, members: list[MemberInfo], *, by_load: bool) -> dict[str, float]:
        """Each member's capacity: its reported cpu limit (the median of the others' if it never
        reported) when ``by_load``, else its declared ``capacity``."""
        if not by_load:
            return {m.member_id: max(m.capacity, 1e-9) for m in members}
        limits = [self._limit[m.member_id] for m in members if m.member_id in self._limit]
        default_limit = statistics.median(limits) if limits else 100.0
        return {m.member_id: self._limit.get(m.member_id, default_limit) for m in members}

    def background_of(self, member_id: str) -> float:
        """A member's load besides its tasks (a foreign process, the runtime), from the snapshots."""
        window = self._background.get(member_id)
        return statistics.median(window) if window else self._floor.get(member_id, 0.0)

    def mature(self, tasks: Iterable[TaskSpec], samples: int = 3) -> bool:
        """Have most of these tasks been seen ``samples`` times (enough to tell a spike)?"""
        return self.mature_ids([t.task_id for t in tasks], samples)

    def mature_ids(self, ids: list[str], samples: int = 3) -> bool:
        """``mature`` by task id."""
        histories = self._tasks
        seen = sum(1 for t in ids if (h := histories.get(t)) is not None and len(h.samples) >= samples)
        return seen * 2 >= len(ids)

    def forget(self, members: Mapping[str, object]) -> None:
        """Drop the background of members that left (their limit is kept: they may come back)."""
        for gone in set(self._background) - set(members):
            del self._background[gone]
        for gone in set(self._floor) - set(members):
            del self._floor[gone]
