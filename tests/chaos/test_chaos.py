"""The seeded fault schedule, 50 faults (`make chaos` runs 1,000): real coordinator, ZooKeeper and
worker processes; no task on two live workers at once, no task unowned past the bound, every fault
settled from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import run_schedule, table, violations
from tests.zookeeper_server import require_zookeeper


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.zookeeper
def test_50_seeded_faults_keep_ownership(tmp_path: Path) -> None:
    require_zookeeper()
    results = run_schedule(50, seed=1, workdir=tmp_path)
    print(table(results))
    assert violations(results) == []
    assert sum(len(r.report.faults) for r in results if r.report) == 50


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.zookeeper
def test_sharded_faults_keep_ownership(tmp_path: Path) -> None:
    """Three sharded coordinators: SIGKILL, SIGSTOP past the ZooKeeper session, ZooKeeper cut off
    (`make chaos` runs 300 faults)."""
    require_zookeeper()
    results = run_schedule(8, seed=8, workdir=tmp_path, envs=("sharded",))  # seed 8: each sharded kind once
    print(table(results))
    assert violations(results) == []
    faults = [f.kind for r in results if r.report for f in r.report.faults]
    assert len(faults) == 8
    assert {"shard_kill", "shard_stop", "zk_cut"} <= set(faults), faults
