"""The ZooKeeper client benchmark runs at its small size and prints both handlers' rows and its ratio."""

from __future__ import annotations

import re
import sys

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT
from tests.scripts import refused
from tests.zookeeper_server import require_zookeeper

BENCH = ROOT / "benchmarks" / "zk_client_bench.py"


@pytest.mark.slow
@pytest.mark.zookeeper
def test_zk_client_bench_quick_prints_both_handlers(cli_env: dict[str, str]) -> None:
    require_zookeeper()
    done = run_within([sys.executable, str(BENCH), "--quick"], 120, cwd=ROOT, env=cli_env)
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]  # 1: the ratio missed (a loaded machine)
    rows = re.findall(r"^\| 1 \| (kazoo's handler|PollingHandler) \| (\d+) \| ([\d.]+) \| (\d+) \|$", done.stdout, re.MULTILINE)
    assert sorted(r[0] for r in rows) == ["PollingHandler", "kazoo's handler"], done.stdout
    assert all(int(r[1]) == 1350 and float(r[2]) > 0 for r in rows), rows  # 1,000 + 250 single + 2 x 50 watched
    assert re.search(r"^PollingHandler / kazoo's handler, CPU per request: \d+\.\d\d", done.stdout, re.MULTILINE)


def test_zk_client_bench_refuses_a_bad_size_with_its_reason(cli_env: dict[str, str]) -> None:
    for bad in (["--reads", "5"], ["--rounds", "0"]):
        assert "--reads at least 100" in refused(BENCH, bad, cli_env)
