"""A fixed CPU budget for a benchmarked process, from a Linux cgroup's CPU quota.

Why: on a two-core machine, two servers at full speed leave nothing for the load generator, ZooKeeper
and the checker, so "two processes against one" measures the neighbours as much as the servers. Give
each server the same budget (half a core, say) and the comparison is fair: one process with half a
core against two with half a core each, with a whole core left for everything else. If the design
shares nothing between processes, the pair does twice what one does.

cgroup v1 (``/sys/fs/cgroup/cpu``) and v2 (a ``cpu`` controller at the unified root) are both
handled; ``CpuCaps.open`` returns ``None`` with a reason where neither is writable (not root, a
read-only cgroup mount), and the benchmark then measures without budgets.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

__all__ = ["CpuCaps", "process_cpu_s"]

PERIOD_US = 10_000  # a short period: a throttled server waits at most this long, not CFS's default 100 ms
V1_ROOT = Path("/sys/fs/cgroup/cpu")
V2_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def process_cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used so far, all its threads (gone ones too), to the nanosecond.

    Why not psutil: it reads ``/proc/PID/stat``, counted in 10 ms ticks, and one change in a small
    group costs the coordinator a few milliseconds, which then reads as 0 or 0.01. The kernel's
    per-process CPU clock (the id ``clock_getcpuclockid`` would give) is exact.
    """
    try:
        return time.clock_gettime((~pid << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except OSError:  # not Linux, or the process is gone: the ticks, if there are any
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)


class CpuCaps:
    """One cgroup per capped process, each with ``cores`` of CPU time per wall second."""

    def __init__(self, root: Path, version: int, cores: float) -> None:
        self.root = root
        self.version = version
        self.cores = cores
        self._groups: list[Path] = []

    @classmethod
    def open(cls, cores: float) -> tuple[CpuCaps | None, str]:
        """The caps, or ``None`` and why not."""
        if (V1_ROOT / "cpu.cfs_quota_us").exists():
            caps = cls(V1_ROOT, 1, cores)
        else:
            root = next((r for r in V2_ROOTS if "cpu" in _read(r / "cgroup.controllers").split()), None)
            if root is None:
                return None, "no cgroup CPU controller here"
            try:
                (root / "cgroup.subtree_control").write_text("+cpu")
            except OSError as exc:
                return None, f"cannot enable the cgroup CPU controller: {exc.strerror}"
            caps = cls(root, 2, cores)
        try:
            probe = caps._make(f"groupcoord-bench-probe-{os.getpid()}")
            probe.rmdir()
        except OSError as exc:
            return None, f"cannot make a cgroup under {caps.root}: {exc.strerror}"
        return caps, ""

    def cap(self, pid: int) -> None:
        """Move ``pid`` (all its threads, and the children it starts later) into a budget of its own."""
        group = self._make(f"groupcoord-bench-{pid}")
        self._groups.append(group)
        (group / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        """Remove the cgroups (their processes must have ended; a live one is moved back to the root)."""
        for group in self._groups:
            for pid in _read(group / "cgroup.procs").split():
                try:
                    (self.root / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
            try:
                group.rmdir()
            except OSError:
                pass
        self._groups.clear()

    def _make(self, name: str) -> Path:
        group = self.root / name
        group.mkdir(exist_ok=True)
        quota = max(1000, int(self.cores * PERIOD_US))
        if self.version == 1:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        return group


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
