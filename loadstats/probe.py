"""Load probes: what a worker reports.

:class:`LoadProbe` is the pluggable contract (``collect() -> LoadReport``). :class:`PsutilProbe`
is the default: host (or process) cpu and memory and host network bandwidth from ``psutil``, and
per-task figures from the service through the ``task_loads`` callback.

Units are Pulsar's ``LocalBrokerData`` ones: cpu in percent of one core (limit = 100 x cores),
memory in MB, bandwidth in KB/s (limit from the NICs' link speed, 0 when unknown). There is no
JVM direct memory in a Python service: ``direct_memory`` is ``(0, 0)`` (unknown).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Literal, Protocol, runtime_checkable

import psutil

from groupcoord.loadstats.samples import LoadReport, ResourceUsage, TaskLoad

__all__ = ["LoadProbe", "PsutilProbe"]

log = logging.getLogger(__name__)

MB = 1024 * 1024


@runtime_checkable
class LoadProbe(Protocol):
    """Collects one load report. Called from the worker's reporting loop."""

    def collect(self) -> LoadReport: ...


class PsutilProbe:
    """Default probe: psutil figures + the service's per-task loads.

    ``scope="host"`` (default, as Pulsar's ``LinuxBrokerHostUsageImpl``) reports the host's cpu
    and used memory; ``scope="process"`` reports this process's cpu (all threads; may exceed 100
    per core count) and RSS. Cpu and network are deltas since the previous ``collect()`` (the
    first call measures since construction). If ``task_loads`` raises, the error is logged and
    the last good task list is reported again.
    """

    def __init__(
        self,
        task_loads: Callable[[], Iterable[TaskLoad]] = tuple,
        *,
        scope: Literal["host", "process"] = "host",
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if scope not in ("host", "process"):
            raise ValueError(f"scope must be 'host' or 'process', got {scope!r}")
        self._task_loads = task_loads
        self._scope = scope
        self._wall_ms = wall_clock_ms
        self._clock = clock
        self._cores = psutil.cpu_count() or 1
        self._process = psutil.Process()
        self._last_tasks: tuple[TaskLoad, ...] = ()
        # prime the delta-based counters
        psutil.cpu_percent(interval=None)
        self._process.cpu_percent(interval=None)
        self._net_at = self._clock()
        self._net = self._net_bytes()

    @staticmethod
    def _nics() -> dict[str, object]:
        return {
            name: stats for name, stats in psutil.net_if_stats().items() if stats.isup and not name.startswith("lo")
        }

    def _net_bytes(self) -> tuple[int, int]:
        nics = self._nics()
        counters = psutil.net_io_counters(pernic=True)
        recv = sum(c.bytes_recv for n, c in counters.items() if n in nics)
        sent = sum(c.bytes_sent for n, c in counters.items() if n in nics)
        return recv, sent

    def _bandwidth_limit_kbs(self) -> float:
        mbits = sum(getattr(s, "speed", 0) or 0 for s in self._nics().values())
        return mbits * 1_000_000 / 8 / 1024 if mbits > 0 else 0.0

    def _tasks(self) -> tuple[TaskLoad, ...]:
        try:
            self._last_tasks = tuple(self._task_loads())
        except Exception:
            log.exception("load probe: task_loads callback failed; reporting the last task loads")
        return self._last_tasks

    def collect(self) -> LoadReport:
        limit_cpu = 100.0 * self._cores
        vm = psutil.virtual_memory()
        total_mb = vm.total / MB
        if self._scope == "host":
            cpu = psutil.cpu_percent(interval=None) * self._cores
            mem = (vm.total - vm.available) / MB
        else:
            cpu = self._process.cpu_percent(interval=None)
            mem = self._process.memory_info().rss / MB
        now = self._clock()
        recv, sent = self._net_bytes()
        dt = max(now - self._net_at, 1e-6)
        in_kbs = max(0, recv - self._net[0]) / 1024 / dt
        out_kbs = max(0, sent - self._net[1]) / 1024 / dt
        self._net_at, self._net = now, (recv, sent)
        bw_limit = self._bandwidth_limit_kbs()
        return LoadReport(
            ts_ms=self._wall_ms(),
            cpu=ResourceUsage(cpu, limit_cpu),
            memory=ResourceUsage(mem, total_mb),
            direct_memory=ResourceUsage(0.0, 0.0),
            bandwidth_in=ResourceUsage(in_kbs, bw_limit),
            bandwidth_out=ResourceUsage(out_kbs, bw_limit),
            tasks=self._tasks(),
        )
