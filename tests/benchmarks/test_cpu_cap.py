"""The scale benchmark's CPU budget (``benchmarks/cpu_cap.py``) holds a busy process to its share, and
leaves no cgroup behind."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from types import ModuleType

import psutil
import pytest

from tests.paths import ROOT


def _cpu_cap() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cpu_cap", ROOT / "benchmarks" / "cpu_cap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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
