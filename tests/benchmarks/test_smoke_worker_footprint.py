"""The worker footprint benchmark runs end to end at smoke size: a coordinator process, a baseline and
both clients, one table row each."""

from __future__ import annotations

import sys

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
@pytest.mark.slow
def test_worker_footprint_bench_prints_every_row(cli_env: dict[str, str]) -> None:
    done = run_within(
        [sys.executable, str(ROOT / "benchmarks" / "worker_footprint_bench.py"), "--window", "1", "--sizes", "1,3"],
        240, cwd=ROOT, env=cli_env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split()[:2] for line in done.stdout.splitlines()
            if line.split()[:1] in (["baseline"], ["threaded"], ["asyncio"])]
    assert rows == [["baseline", "0"], ["threaded", "1"], ["asyncio", "1"], ["threaded", "3"], ["asyncio", "3"]]
