"""The Session stream benchmark runs end to end at smoke size: a capped coordinator process, generator
processes on unary calls and on streams, the capacity steps and the join of one member, every row."""

from __future__ import annotations

import re
import sys

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT
from tests.scripts import refused

BENCH = ROOT / "benchmarks" / "stream_bench.py"


@pytest.mark.slow
@pytest.mark.heavy
def test_stream_bench_quick_prints_every_row(cli_env: dict[str, str]) -> None:
    done = run_within([sys.executable, str(BENCH), "--quick", "--steps", "40", "--sizes", "30", "--generators", "2"],
                      300, cwd=ROOT, env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    steps = [line.split()[:2] for line in lines if line.startswith("  ")]
    assert steps == [["unary", "40"], ["stream", "40"]], done.stdout
    assert all("errors 0" in line for line in lines if line.startswith("  ")), done.stdout
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines
            if line.startswith("| ") and "---" not in line]
    assert [row[0] for row in rows] == ["measure", "members held at p99 < 100 ms (1 hb/s)",
                                        "coordinator CPU per heartbeat, beyond its idle cost (µs)",
                                        ("one member joins 30: from the rebalance's start to every member's "
                                         "JoinGroup (s)"),
                                        "one member joins 30: to the first JoinGroup answer / the leader's SyncGroup (s)",
                                        "one member joins 30: every member synced (s)",
                                        "one member joins 30: coordinator CPU meanwhile (s)"], done.stdout
    assert all(float(cell) > 0 for cell in rows[2][1:3]), done.stdout  # one step: its average
    joined_unary, joined_stream = (float(cell) for cell in rows[3][1:3])
    # pushed: every member heard of the rebalance sooner than at its next (1 s) heartbeat
    assert joined_stream < joined_unary, done.stdout
    for row in rows[4:7]:  # every phase measured, in order, both ways
        assert all(float(value) > 0 for cell in row[1:3] for value in cell.split(" / ")), done.stdout
    for mode in (1, 2):
        answer, leader = (float(v) for v in rows[4][mode].split(" / "))
        assert answer <= leader <= float(rows[5][mode]), done.stdout
    assert "generators' least idle share" in done.stdout
    waited = re.search(r"most time waiting for a CPU: (\d+)%", done.stdout)  # their event loops' threads
    assert waited is not None and 0 <= int(waited.group(1)) <= 100, done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--steps", "100,x"], "'100,x' is not a comma-separated list of positive whole numbers"),
    (["--sizes", "0"], "'0' is not a comma-separated list of positive whole numbers"),
    (["--cores", "99"], "--cores: between 0 (no budget) and"),
])
def test_stream_bench_refuses_bad_input_in_one_line(cli_env: dict[str, str], args: list[str], message: str) -> None:
    assert message in refused(BENCH, args, cli_env)
