"""The protocol benchmark's side-by-side table runs end to end at toy size."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from groupcoord import coordinator
from tests.deadlines import run_within
from tests.paths import ROOT

BENCH = ROOT / "benchmarks" / "protocol_bench.py"


@pytest.mark.heavy
def test_classic_and_consumer_side_by_side() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(coordinator.__file__).parent.parent))
    done = run_within([sys.executable, str(BENCH), "--sizes", "40", "--tasks", "400"], 600, env=env)
    assert done.returncode == 0, done.stderr
    change, _, formed = done.stdout.partition("formed from nothing")
    rows = {line.split()[1]: line.split() for line in change.splitlines() if line.strip().startswith("40 ")}
    assert set(rows) == {"classic", "consumer"}, done.stdout
    classic, consumer = rows["classic"], rows["consumer"]
    assert int(classic[4].replace(",", "")) == 3 * 40 + 3  # every member heartbeats, re-joins and syncs
    # the consumer change: the newcomer's join and the givers' acks, fewer members than the group
    assert int(consumer[4].replace(",", "")) < int(classic[4].replace(",", ""))
    assert int(consumer[5].replace(",", "")) <= 41
    assert float(consumer[6]) <= 2.0, done.stdout  # the newcomer ran its tasks within two intervals
    assert "(next)" in change  # the next change, once the group settled
    notes = [line for line in change.splitlines() if "untouched members' heartbeats" in line]
    assert len(notes) == 2 and all("probes" in n and "new epochs taken" in n for n in notes), change  # shown
    [formation] = [line.split() for line in formed.splitlines() if line.strip().startswith("40 ")]
    assert int(formation[2].replace(",", "")) >= 40 and float(formation[3]) > 0  # every member called; it took time
