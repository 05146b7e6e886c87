"""The ownership log and its checker.

Every chaos worker is a ``groupcoord worker`` process whose stdout is opened ``O_APPEND`` on one
shared file: each event is one JSON line written with one ``write`` (``ts`` is wall-clock
seconds, CLOCK_REALTIME, comparable across processes of one machine). The runner appends its own
lines to the same file: ``{"event": "fault", "kind", "phase": "inject"|"heal", "target", "group"}``
and ``{"event": "end"}`` before it stops the workers.

From the worker lines the checker builds, per task, who ran it when: ``assigned`` starts the
listed tasks (eager: the whole assignment; cooperative: the new ones), ``revoked`` and ``lost``
stop them, a ``worker_kill`` fault stops everything the killed process ran. Worker names are
``GROUP/SLOT#INCARNATION``: one name per process, and the group a task belongs to.

Two properties:

* **No task on two members at once.** Member B starting a task while A still runs it (A's stop
  is later than B's start) is a violation, with one allowance: A was SIGSTOPped before B started
  and logged its stop within ``notice_s`` of its SIGCONT. A stopped process cannot log anything;
  on SIGCONT its heartbeat tick wakes at once (its deadline passed) and its next heartbeat, or the
  call that was in flight when it stopped (its deadline passed too), tells it the session is gone.
  The allowed bound is one heartbeat interval plus the longest call deadline in Stable (half the
  session), plus half a second of scheduling slack on a loaded machine.
* **No task unowned for long.** After a fault heals, no task stays without an owner longer than
  the session timeout plus the rebalance timeout. A gap that opened before the heal counts from
  the heal. Why that is enough after a coordinator restart, however long: the restarted coordinator
  restarts every member's session when it loads; a member that could not reach it tries again at
  least once a heartbeat interval (``worker.retry.wait_s``; the channel reconnects within a second),
  so it is heard from within that session and gets its tasks back, or its session ends and the
  rebalance that follows ends within the rebalance timeout. (With the full join backoff, 10 s, a
  member could call 10 s after the heal: 18 tasks unowned 6.2 s after one at load 16.)
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Fault", "Gap", "Interval", "OwnershipLog", "Overlap", "Report", "blame", "check"]


@dataclass(frozen=True)
class Interval:
    """``worker`` (one process incarnation) ran ``task`` from ``start`` to ``stop`` (inf: till the end)."""

    task: str
    worker: str
    member: str
    generation: int
    start: float
    stop: float


@dataclass
class Fault:
    """One injected fault; ``heal`` is when the runner undid it (the part is back)."""

    fid: int
    kind: str
    target: str
    group: str
    inject: float
    heal: float = math.nan


@dataclass(frozen=True)
class Overlap:
    task: str
    first: Interval
    second: Interval
    allowed: bool
    why: str

    @property
    def seconds(self) -> float:
        return min(self.first.stop, self.second.stop) - max(self.first.start, self.second.start)

    def __str__(self) -> str:
        return (f"{self.task}: {self.second.worker} (gen {self.second.generation}) started at {self.second.start:.3f} "
                f"while {self.first.worker} (gen {self.first.generation}) ran it until {self.first.stop:.3f} "
                f"({self.seconds:.3f}s; {self.why})")


@dataclass(frozen=True)
class Gap:
    task: str
    start: float
    stop: float
    fault: Fault | None
    excess: float  # seconds past the allowed bound (<= 0: within it)

    @property
    def seconds(self) -> float:
        return self.stop - self.start


@dataclass
class Report:
    overlaps: list[Overlap] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    stop_notice: list[float] = field(default_factory=list)  # per SIGSTOP: SIGCONT -> last stop it logged

    @property
    def violations(self) -> list[str]:
        out = [f"overlap {o}" for o in self.overlaps if not o.allowed]
        out += [f"gap {g.task} unowned {g.seconds:.2f}s ({g.excess:.2f}s past the bound) after "
                f"{g.fault.kind if g.fault else 'no fault'}" for g in self.gaps if g.excess > 0]
        return out


@dataclass
class OwnershipLog:
    """The parsed log: intervals per task, faults, end time."""

    intervals: dict[str, list[Interval]]
    faults: list[Fault]
    end: float
    group_of: dict[str, str]  # task -> group

    @classmethod
    def read(cls, path: Path) -> OwnershipLog:
        with path.open() as handle:
            return cls.parse(handle)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> OwnershipLog:
        events = sorted((json.loads(line) for line in lines if line.strip()), key=lambda e: float(e["ts"]))
        running: dict[tuple[str, str], tuple[str, int, float]] = {}  # (worker, task) -> (member, generation, start)
        intervals: dict[str, list[Interval]] = defaultdict(list)
        faults: dict[int, Fault] = {}
        group_of: dict[str, str] = {}
        end = events[-1]["ts"] if events else 0.0

        def stop(worker: str, task: str, ts: float) -> None:
            began = running.pop((worker, task), None)
            if began is not None:
                intervals[task].append(Interval(task, worker, began[0], began[1], began[2], ts))

        for event in events:
            kind, ts = event["event"], float(event["ts"])
            worker = str(event.get("worker", ""))
            if kind == "assigned":
                for task in event["tasks"]:
                    running.setdefault((worker, task), (str(event.get("member_id", "")),
                                                        int(event.get("generation", -1)), ts))
                    group_of[task] = worker.partition("/")[0]
            elif kind in ("revoked", "lost"):
                for task in event["tasks"]:
                    stop(worker, task, ts)
            elif kind == "fault":
                fid = int(event["id"])
                if event["phase"] == "inject":
                    faults[fid] = Fault(fid, event["kind"], event.get("target", ""), event.get("group", ""), ts)
                    if event["kind"] == "worker_kill":
                        for (owner, task) in [key for key in running if key[0] == event["target"]]:
                            stop(owner, task, ts)
                elif fid in faults:
                    faults[fid].heal = ts
            elif kind == "end":
                end = ts
        for (worker, task), (member, generation, start) in running.items():
            intervals[task].append(Interval(task, worker, member, generation, start, math.inf))
        for task_intervals in intervals.values():
            task_intervals.sort(key=lambda i: i.start)
        return cls(dict(intervals), sorted(faults.values(), key=lambda f: f.inject), end, group_of)


def _overlaps(log: OwnershipLog, notice_s: float) -> Iterator[Overlap]:
    stops = [f for f in log.faults if f.kind == "worker_stop"]
    for task, intervals in log.intervals.items():
        for i, first in enumerate(intervals):
            for second in intervals[i + 1:]:
                if second.start >= first.stop:
                    continue  # sorted by start, but a later one may still overlap an earlier long one
                if second.worker == first.worker:
                    continue
                yield _judge(task, first, second, stops, notice_s)


def _judge(task: str, first: Interval, second: Interval, stops: list[Fault], notice_s: float) -> Overlap:
    """Allowed only if ``first``'s process was SIGSTOPped before ``second`` started and stopped the
    task within ``notice_s`` of its SIGCONT."""
    candidates = [f for f in stops if f.target == first.worker and f.inject <= second.start and not math.isnan(f.heal)]
    if candidates:
        fault = candidates[-1]  # the latest SIGSTOP before the second start
        late = first.stop - fault.heal
        if late <= notice_s:
            return Overlap(task, first, second, True, f"{first.worker} was SIGSTOPped; stopped {late:.3f}s after SIGCONT")
        return Overlap(task, first, second, False,
                       f"{first.worker} was SIGSTOPped but stopped {late:.3f}s after SIGCONT (> {notice_s:.2f}s)")
    return Overlap(task, first, second, False, "no SIGSTOP explains it")


def _gaps(log: OwnershipLog, bound_s: float, since: float) -> Iterator[Gap]:
    for task, intervals in log.intervals.items():
        covered_until = -math.inf
        first = True
        for interval in intervals:
            if not first and interval.start > covered_until and covered_until < log.end:
                start, stop = covered_until, min(interval.start, log.end)
                if stop > since:
                    yield _gap(log, task, max(start, since), stop, bound_s)
            first = False
            covered_until = max(covered_until, interval.stop)
        if not first and covered_until < log.end and log.end > since:
            yield _gap(log, task, max(covered_until, since), log.end, bound_s)


def blame(faults: list[Fault], ts: float, group: str) -> Fault | None:
    """The latest fault injected by ``ts`` on ``group``, or on every group."""
    blamed = None
    for fault in faults:
        if fault.inject > ts:
            break
        if not fault.group or fault.group == group:
            blamed = fault
    return blamed


def _gap(log: OwnershipLog, task: str, start: float, stop: float, bound_s: float) -> Gap:
    blamed = blame(log.faults, start, log.group_of.get(task, ""))
    healed = start if blamed is None or math.isnan(blamed.heal) else max(start, blamed.heal)
    return Gap(task, start, stop, blamed, stop - healed - bound_s)


def check(log: OwnershipLog, *, session_s: float, rebalance_timeout_s: float, heartbeat_s: float,
          since: float = -math.inf) -> Report:
    """Judge ``log``: every overlap (allowed or not) and every unowned gap after ``since``."""
    notice_s = heartbeat_s + session_s / 2 + 0.5
    report = Report(faults=log.faults)
    report.overlaps = list(_overlaps(log, notice_s))
    report.gaps = [g for g in _gaps(log, session_s + rebalance_timeout_s, since) if g.seconds > 0]
    for fault in log.faults:
        if fault.kind != "worker_stop" or math.isnan(fault.heal):
            continue
        stopped = [i.stop for intervals in log.intervals.values() for i in intervals
                   if i.worker == fault.target and i.start < fault.inject < i.stop and i.stop >= fault.heal]
        if stopped:
            report.stop_notice.append(max(stopped) - fault.heal)
    return report


def event(what: str, ts: float, /, **fields: Any) -> str:
    """One log line (the runner's own lines, and tests')."""
    return json.dumps({"event": what, "ts": ts, **fields}) + "\n"
