"""The scale-out benchmark runs end to end at smoke size: ZooKeeper, no-op servers and sharded
coordinators (1 and 2 of each), groups formed over the wire, a shard move and a SIGKILL failover."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import ROOT
from tests.zookeeper_server import require_zookeeper


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.zookeeper
def test_scale_bench_quick_prints_every_row(cli_env: dict[str, str]) -> None:
    require_zookeeper()
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale_bench.py"), "--quick", "--steps", "50"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=240, env=cli_env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("|")[1].strip() for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["servers", "1 no-op server", "2 no-op servers", "1 coordinator", "2 coordinators"], done.stdout
    assert "target: 2 coordinator processes >= 1.8x one:" in done.stdout
    moves = next(line for line in done.stdout.splitlines() if line.startswith("shard move"))
    assert " 0 moves" not in moves and "p50 nan" not in moves, moves
    failover = next(line for line in done.stdout.splitlines() if line.startswith("failover per shard"))
    assert " 0 shards" not in failover, failover
