"""The scale-out benchmark runs end to end at smoke size: ZooKeeper, no-op servers and sharded
coordinators (1 and 2 of each) loaded by h2load on real members formed over the wire, a shard move
and a SIGKILL failover."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.paths import ROOT
from tests.zookeeper_server import require_zookeeper

BENCH = ROOT / "benchmarks" / "scale_bench.py"


@pytest.mark.slow
@pytest.mark.zookeeper
def test_scale_bench_quick_prints_every_row(cli_env: dict[str, str]) -> None:
    require_zookeeper()
    # h2load is the bench's generator; it installs it when root, else the Python generators stand in
    generator = "h2load" if shutil.which("h2load") or os.geteuid() == 0 else "python"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--steps", "100", "--generator", generator],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=240, env=cli_env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ") and "---" not in line]
    assert rows == ["servers", "1 no-op server", "2 no-op servers", "1 coordinator", "2 coordinators"], done.stdout
    assert "target: 2 coordinator processes >= 1.8x one:" in done.stdout
    if generator == "h2load":
        steps = [line for line in lines if " hb/s asked " in line]
        assert [line.split()[0:2] for line in steps] == [
            ["noop", "x1"], ["noop", "x2"], ["coordinator", "x1"], ["coordinator", "x2"]], done.stdout
        # every answer OK by size, and the real client's heartbeat of each member NONE mid-step
        assert not [line for line in steps if "not OK" in line or "real client" in line], done.stdout
        assert all(float(line.split(" hb/s asked ")[1].split()[0]) > 0 for line in steps), done.stdout
    moves = next(line for line in lines if line.startswith("shard move"))
    assert " 0 moves" not in moves and "p50 nan" not in moves, moves
    failover = next(line for line in lines if line.startswith("failover per shard"))
    assert " 0 shards" not in failover, failover


def test_scale_bench_refuses_bad_steps_in_one_line(cli_env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--steps", "100,x"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=cli_env)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--steps: '100,x' is not a comma-separated list of positive whole numbers" in done.stderr
