"""The instruction-count benchmark of heartbeats: its table at toy size under a real valgrind, and its bad input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from groupcoord import coordinator
from tests.deadlines import run_within
from tests.paths import ROOT

BENCH = ROOT / "benchmarks" / "heartbeat_instructions.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(coordinator.__file__).parent.parent))
    return run_within([sys.executable, str(BENCH), *args], 900, env=env)


@pytest.mark.heavy
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (.ci/run installs it)")
def test_counts_instructions_per_heartbeat_by_place() -> None:
    done = _run("--quick")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()
            if line.startswith(("noop ", "coordinator "))}
    assert set(rows) == {"noop", "coordinator"}, done.stdout
    for kind, cells in rows.items():
        total, python = (float(c.replace(",", "")) for c in cells[:2])
        assert 50_000 < total < 5_000_000 and 0 < python < total, (kind, done.stdout)
    assert 0.3 < float(rows["coordinator"][-1]) < 2, done.stdout  # the ratio against the no-op


@pytest.mark.parametrize("args", [["--kinds", "noop,fast"], ["--counts", "5000,1000"], ["--counts", "many"]])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str]) -> None:
    done = _run(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert "error:" in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr
