"""When a worker sends a load report (Pulsar's ``LoadReportUpdaterTask`` / ``needBrokerDataUpdate``).

The worker collects a report every few seconds and asks :meth:`ReportPolicy.should_send`; after
the coordinator accepted it, it calls :meth:`ReportPolicy.sent`. A report is sent when

* no report was sent yet, or
* more than ``max_interval_s`` passed since the last one sent, or
* the set of tasks changed (a task added or removed), or
* the largest change since the last report sent exceeds ``threshold_percentage``:

  - each resource with a known limit (> 0) on both sides: the change of its usage fraction in
    percentage points, ``100·|u1/l1 - u0/l0|`` (Pulsar compares the max resource usage this way;
    comparing each resource is stricter);
  - a resource with an unknown limit: the relative change of its usage, in percent;
  - the total msg rate (in + out over all tasks) and total throughput (in + out), relative change
    in percent, as Pulsar does.

Zero baselines: a relative change from 0 is infinite in Pulsar, so any blip off an idle worker
would send. Here values whose magnitude is at most a noise floor (``rate_floor`` msg/s,
``throughput_floor`` bytes/s, ``usage_floor``) count as zero, and a change between two "zero"
values is no change; a change from "zero" to above the floor is infinite (sends).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from groupcoord.loadstats.samples import LoadReport

__all__ = ["ReportPolicy", "percent_change"]


def percent_change(old: float, new: float, floor: float = 0.0) -> float:
    """``100·|new - old| / |old|``; 0 when both are within ``floor`` of 0, inf from a zero baseline."""
    old_zero = abs(old) <= floor
    new_zero = abs(new) <= floor
    if old_zero and new_zero:
        return 0.0
    if old_zero:
        return math.inf
    return 100.0 * abs(new - old) / abs(old)


@dataclass
class ReportPolicy:
    """Decides whether a load report is worth sending. Not thread-safe (one worker loop uses it).

    ``threshold_percentage`` (default 10, Pulsar's ``loadBalancerReportUpdateThresholdPercentage``)
    and ``max_interval_s`` (default 900 s = 15 min, ``loadBalancerReportUpdateMaxIntervalMinutes``);
    ``clock`` is monotonic seconds.
    """

    threshold_percentage: float = 10.0
    max_interval_s: float = 900.0
    clock: Callable[[], float] = time.monotonic
    rate_floor: float = 1.0
    throughput_floor: float = 1024.0
    usage_floor: float = 1e-9

    def __post_init__(self) -> None:
        if not self.threshold_percentage >= 0:
            raise ValueError(f"threshold_percentage must be >= 0, got {self.threshold_percentage}")
        if not self.max_interval_s > 0:
            raise ValueError(f"max_interval_s must be > 0, got {self.max_interval_s}")
        self._last: LoadReport | None = None
        self._last_sent_at: float | None = None

    @property
    def last_sent(self) -> LoadReport | None:
        return self._last

    def max_change(self, report: LoadReport) -> float:
        """The largest change (percent / percentage points) of ``report`` vs the last one sent."""
        last = self._last
        if last is None:
            return math.inf
        if {t.task_id for t in last.tasks} != {t.task_id for t in report.tasks}:
            return math.inf
        changes = [0.0]
        old_res, new_res = last.resources(), report.resources()
        for name, new in new_res.items():
            old = old_res[name]
            if old.limit > 0 and new.limit > 0:
                changes.append(100.0 * abs(new.usage / new.limit - old.usage / old.limit))
            else:
                changes.append(percent_change(old.usage, new.usage, self.usage_floor))
        changes.append(percent_change(last.msg_rate_total, report.msg_rate_total, self.rate_floor))
        changes.append(percent_change(last.msg_throughput_total, report.msg_throughput_total, self.throughput_floor))
        return max(changes)

    def reason(self, report: LoadReport) -> str | None:
        """Why ``report`` should be sent (``"first"``, ``"interval"``, ``"tasks"``, ``"change"``) or None."""
        if self._last is None or self._last_sent_at is None:
            return "first"
        if self.clock() - self._last_sent_at > self.max_interval_s:
            return "interval"
        if {t.task_id for t in self._last.tasks} != {t.task_id for t in report.tasks}:
            return "tasks"
        if self.max_change(report) > self.threshold_percentage:
            return "change"
        return None

    def should_send(self, report: LoadReport) -> bool:
        """True when ``report`` should be sent now (see the module docstring)."""
        return self.reason(report) is not None

    def sent(self, report: LoadReport) -> None:
        """Record that ``report`` was sent (and accepted) now."""
        self._last = report
        self._last_sent_at = self.clock()
