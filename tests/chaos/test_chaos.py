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


@pytest.mark.slow
@pytest.mark.heavy
def test_consumer_protocol_workers_keep_ownership_through_faults(tmp_path: Path) -> None:
    """Every worker on the consumer protocol (GroupHeartbeat), one coordinator on SQLite, workers behind
    the fault proxy (`make chaos` runs 300 faults over SQLite and ZooKeeper HA)."""
    results = run_schedule(8, seed=284, workdir=tmp_path, envs=("sqlite",), protocol="consumer")
    print(table(results))
    assert violations(results) == []
    faults = [f.kind for r in results if r.report for f in r.report.faults]
    assert len(faults) == 8  # seed 284: each kind, the proxy black-holing one worker past its session
    assert {"coordinator_kill", "proxy_delay", "proxy_drop", "disk_full", "worker_kill", "worker_stop"} <= set(faults)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.zookeeper
def test_mixed_groups_on_sharded_coordinators_keep_ownership_through_faults(tmp_path: Path) -> None:
    """Every group half classic, half consumer protocol, on three sharded coordinators: each group forms
    classic and converts; at the end its consumer-protocol workers stop first and it converts back, its
    last consumer-protocol member gone, as Kafka's (`make chaos` runs 100 faults). A killed consumer
    worker's group converts back mid-run only if its restart comes after the dead member's session ends, a
    race with the restart's start-up, so that is not counted on here (the model's hypothesis test has it)."""
    require_zookeeper()
    # seed 357: zk_cut; g0's consumer worker killed while g1's is SIGSTOPped; shard_stop; shard_kill
    results = run_schedule(5, seed=357, workdir=tmp_path, envs=("sharded",), protocol="mixed")
    print(table(results))
    assert violations(results) == []
    faults = [f.kind for r in results if r.report for f in r.report.faults]
    assert {"shard_kill", "shard_stop", "zk_cut", "worker_kill", "worker_stop"} <= set(faults), faults
    converted, back = results[0].conversions
    assert converted >= 3 and back >= 3, results[0].conversions  # three groups, each converted and back once at least
