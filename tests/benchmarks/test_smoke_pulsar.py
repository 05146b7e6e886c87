"""The Pulsar simulator and benchmark run end to end in their --quick mode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT


def run(script: str, *args: str) -> str:
    done = run_within([sys.executable, str(ROOT / "benchmarks" / script), "--quick", *args], 300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
def test_balance_sim_quick_prints_table_and_saves_plots(tmp_path: Path) -> None:
    out = run("balance_sim.py", "--out", str(tmp_path))
    for name in ("pulsar-threshold", "pulsar-uniform", "pulsar-avg", "pulsar-overload", "pulsar-transfer", "balanced",
                 "rolling-restart"):
        assert name in out
    for column in ("rounds", "settle", "relapse", "fewest", "jit/100", "foreign%"):
        assert column in out
    assert (tmp_path / "balance_homogeneous.png").stat().st_size > 0
    assert (tmp_path / "foreign_heterogeneous.png").stat().st_size > 0


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
def test_pulsar_bench_quick_prints_table() -> None:
    out = run("pulsar_bench.py")
    for name in ("pulsar-threshold", "pulsar-uniform", "pulsar-avg", "pulsar-overload", "pulsar-transfer", "balanced"):
        assert name in out


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
def test_balance_sim_quick_cooperative(tmp_path: Path) -> None:
    out = run("balance_sim.py", "--protocol", "cooperative", "--only", "balanced,pulsar-avg", "--no-plots")
    assert "protocol: cooperative" in out and "balanced" in out
