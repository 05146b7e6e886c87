"""The election simulation runs end to end at its small size (20 coordinators, 256 shards, 2,000
group records on a real ZooKeeper) and a shard changing hands costs what the delta elections promise:
ZooKeeper reads (its own ``mntr`` counters) at most 10 x coordinators x shards lost, and each
surviving coordinator a few election reads per lost shard, not a re-read of all 256 per event."""

from __future__ import annotations

import json
import sys

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT
from tests.zookeeper_server import require_zookeeper

BENCH = ROOT / "benchmarks" / "election_sim.py"


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.zookeeper
def test_election_sim_quick_reads_per_change(cli_env: dict[str, str]) -> None:
    require_zookeeper()
    done = run_within([sys.executable, str(BENCH), "--quick", "--steady", "3", "--json"], 240, cwd=ROOT, env=cli_env)
    assert done.returncode in (0, 1), done.stdout + done.stderr[-3000:]  # 1: a timing target missed (load)
    lines = done.stdout.splitlines()
    out = json.loads(lines[-1])
    assert "| 1 of 20 SIGKILLed |" in done.stdout and "| 5 of 20 SIGKILLed at once |" in done.stdout
    for row, survivors in ((out["one"], 19), (out["many"], 15)):
        assert row["shards"] > 0
        assert row["zk_reads"] <= 10 * 20 * row["shards"], row
        # each survivor: the lost node's deletion and the winner's creation, an epoch read per win
        assert row["election_reads"] <= 6 * survivors * row["shards"], row
    for row in (out["one"], out["many"]):  # where the time went: ZooKeeper's expiry, then the election's parts
        parts = row["parts"]
        assert set(parts) == {"zookeeper", "notify", "queued", "read", "claim", "load", "after_expiry"}, parts
        assert all(0 <= part["p50"] <= part["max"] for part in parts.values()), parts
    one = out["one"]["parts"]  # one session: every lost shard's time is its expiry plus what followed it
    assert abs(out["one"]["max"] - (one["zookeeper"]["max"] + one["after_expiry"]["max"])) < 0.01, out["one"]
    assert one["zookeeper"]["max"] > 0, one  # found in ZooKeeper's log, after the kill
    steady = out["steady"]  # the window opens once the spread's last notifications are read (Sim.quiet)
    if steady["zk_writes"] == 0 and steady["new_terms"] == 0:
        assert steady["election_reads"] == 0, steady  # nothing changes: nothing is read
    else:  # a term changed within the window after all (a host stalled past max_pause on a loaded machine)
        assert steady["election_reads"] <= 6 * 19 * max(steady["zk_writes"], steady["new_terms"]), steady
    assert 0 < out["added"]["moves"] <= 256 // 21 + 1, out["added"]  # the newcomer's share, nothing more
