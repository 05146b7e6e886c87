"""The seeded fault schedule, 50 faults (`make chaos` runs 1,000): real coordinator, ZooKeeper and
worker processes; no task on two live workers at once, no task unowned past the bound, every fault
settled from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import run_schedule, table, violations
from tests.zookeeper_server import require_zookeeper


@pytest.mark.slow
@pytest.mark.zookeeper
def test_50_seeded_faults_keep_ownership(tmp_path: Path) -> None:
    require_zookeeper()
    results = run_schedule(50, seed=1, workdir=tmp_path)
    print(table(results))
    assert violations(results) == []
    assert sum(len(r.report.faults) for r in results if r.report) == 50
