"""The coordinator benchmark's rebalance and heartbeat-layer tables run end to end at toy size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from groupcoord import coordinator
from tests.deadlines import run_within
from tests.paths import ROOT

BENCH = ROOT / "benchmarks" / "coordinator_bench.py"


def _run(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(Path(coordinator.__file__).parent.parent))
    done = run_within([sys.executable, str(BENCH), *args], 300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
def test_model_share_table() -> None:
    out = _run("--parts", "model", "--sizes", "20,60")
    assert "coordinator share 60 / 20" in out and "JoinGroup bytes" in out


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
@pytest.mark.slow
def test_heartbeat_layers_table() -> None:
    out = _run("--parts", "layers", "--quick")
    rows = [line for line in out.splitlines() if line.startswith(("no-op server", "+ ", "servicer path"))]
    assert [row[:28].strip() for row in rows] == [
        "no-op server", "+ our handlers", "+ servicer and runtime", "+ the rest of the server", "servicer path in-process"
    ], out
    assert all(float(row[38:57]) > 0 for row in rows), out  # each layer's server CPU per request


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
@pytest.mark.slow
def test_end_to_end_table_with_generator_processes() -> None:
    out = _run("--parts", "rebalance", "--sizes", "30")
    assert "generator idle" in out and "server CPU" in out and "no-op floor s" in out
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["30"])
    assert int(row[8]) >= 2 * 31 and float(row[10]) > 0  # every member at least re-joined and synced


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
@pytest.mark.slow
def test_transport_table_compares_a_call_with_a_stream_message() -> None:
    out = _run("--parts", "transport", "--quick")
    rows = {line[:18].strip(): line.split()[-2:] for line in out.splitlines()
            if line.startswith(("unary call", "stream message"))}
    assert set(rows) == {"unary call", "stream message"}, out
    assert all(float(rate) > 0 and float(cpu) > 0 for rate, cpu in rows.values()), out
    assert "a stream message costs the server" in out


def test_bad_part_is_one_line() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(coordinator.__file__).parent.parent))
    done = subprocess.run([sys.executable, str(BENCH), "--parts", "nonsense"], capture_output=True, text=True,
                          timeout=60, env=env, check=False)
    assert done.returncode == 2 and "unknown part(s): nonsense" in done.stderr and "Traceback" not in done.stderr
