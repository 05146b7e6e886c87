"""The task-downtime benchmark runs end to end at smoke size: real worker processes, both scenarios,
every row (the classic protocol's three, the consumer protocol's two), and an ownership log with no task
on two workers at once (the script exits 1 otherwise)."""

from __future__ import annotations

import sys

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT


@pytest.mark.slow
@pytest.mark.heavy
def test_downtime_bench_quick_prints_every_row(cli_env: dict[str, str]) -> None:
    # a 1 s heartbeat: each rebalance waits for heartbeats, and this keeps the run well under a minute
    done = run_within(
        [sys.executable, str(ROOT / "benchmarks" / "downtime_bench.py"), "--quick", "--heartbeat-interval-ms", "1000"],
        420, cwd=ROOT, env=cli_env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for scenario in ("rolling restart", "scale-out"):
        rows = [line for line in done.stdout.splitlines() if line.startswith(scenario + " ")]
        assert [row[16:38].strip() for row in rows] == ["eager", "cooperative", "cooperative + static", "consumer",
                                                        "consumer + static"], rows
    assert "FAILED" not in done.stdout and "DOUBLE OWNERSHIP" not in done.stdout
    assert "target (cooperative + static >= 10x less downtime than eager), rolling restart, instant tasks:" in done.stdout
    assert "rolling restart: consumer + static " in done.stdout
