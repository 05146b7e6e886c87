"""``benchmarks/stats_bench.py --quick`` runs end to end (its own JVM: a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_stats_bench_quick(tmp_path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "stats_bench.py"),
            "--quick",
            "--master",
            "local[2]",
            "--driver-memory",
            "1g",
            "--cache-dir",
            str(tmp_path),
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "samples/s" in proc.stdout and "20,000" in proc.stdout
