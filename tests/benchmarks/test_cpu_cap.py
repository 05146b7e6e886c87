"""The scale benchmark's CPU budget (``benchmarks/cpu_cap.py``) holds a busy process to its share, and
leaves no cgroup behind."""

from __future__ import annotations

import subprocess
import sys
import time
from types import ModuleType

import psutil
import pytest

from tests.paths import ROOT
from tests.scripts import load_script


def _cpu_cap() -> ModuleType:
    module: ModuleType = load_script(ROOT / "benchmarks" / "cpu_cap.py")
    return module


def test_a_busy_process_gets_no_more_than_its_budget() -> None:
    caps, why = _cpu_cap().CpuCaps.open(0.2)
    if caps is None:
        pytest.skip(f"no writable cgroup CPU controller: {why}")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        caps.cap(busy.pid)
        process = psutil.Process(busy.pid)
        before, start = sum(process.cpu_times()[:2]), time.monotonic()
        time.sleep(1.5)  # a measurement window, not an ordering of events
        share = (sum(process.cpu_times()[:2]) - before) / (time.monotonic() - start)
    finally:
        busy.kill()
        busy.wait()
        caps.close()
    # a busy loop alone would take a whole core; a loaded machine only gives it less
    assert share < 0.3, share
    assert not list(caps.root.glob(f"groupcoord-bench-{busy.pid}")), "the cgroup was left behind"


def test_a_process_cpu_reads_to_below_a_clock_tick() -> None:
    """A change in a small group costs the coordinator a few ms: psutil's 10 ms ticks read that as 0."""
    process_cpu_s = _cpu_cap().process_cpu_s
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        started = process_cpu_s(child.pid)  # an interpreter's start: some ms, rarely a whole number of ticks
        assert 0 < started < 30, started
        assert round(started * 1e6) % 10_000, started  # below the 10 ms tick
        before = process_cpu_s(own := psutil.Process().pid)
        mine = time.process_time()
        while time.process_time() - mine < 0.002:
            pass
        spent = process_cpu_s(own) - before
        assert 0.002 <= spent < 0.5, spent
    finally:
        child.kill()
        child.wait()
