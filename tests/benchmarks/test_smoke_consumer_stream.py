"""The consumer-protocol join benchmark runs end to end at smoke size over real gRPC: a capped coordinator,
generator processes on unary calls and on streams, one member joining, every row of the table."""

from __future__ import annotations

import sys

import pytest

from tests.deadlines import run_within
from tests.paths import ROOT
from tests.scripts import refused

BENCH = ROOT / "benchmarks" / "consumer_stream_bench.py"


@pytest.mark.slow
@pytest.mark.heavy
def test_consumer_stream_bench_quick_prints_every_row(cli_env: dict[str, str]) -> None:
    done = run_within([sys.executable, str(BENCH), "--quick", "--sizes", "30", "--tasks", "300",
                       "--generators", "2"], 300, cwd=ROOT, env=cli_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in done.stdout.splitlines()
            if line.startswith("| ") and "---" not in line]
    assert [row[0] for row in rows] == [
        "one member joins (consumer protocol)",
        "30 members: newcomer's first heartbeat to running its whole target (s)",
        "30 members: coordinator CPU meanwhile (s)",
        "30 members: the next change: running its whole target / coordinator CPU (s)",
        "30 members: calls beyond regular heartbeats / members making them"], done.stdout
    assert "never settled" not in done.stdout, done.stdout
    unary_s, stream_s = (float(cell) for cell in rows[1][1:3])
    assert 0 < stream_s and 0 < unary_s <= 2 * 5.0 + 1, done.stdout  # unary: within two 5 s intervals
    assert all(float(cell) > 0 for cell in rows[2][1:3]), done.stdout
    assert all(float(value) > 0 for cell in rows[3][1:3] for value in cell.split(" / ")), done.stdout
    # the change's calls: the newcomer and the members giving tasks up, on streams at most two each
    stream_calls, stream_callers = (int(value) for value in rows[4][2].split(" / "))
    assert 0 < stream_callers < 30 and stream_calls <= 3 * stream_callers, done.stdout
    assert "generators' least idle share" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "10,x"], "'10,x' is not a comma-separated list of positive whole numbers"),
    (["--sizes", "100", "--tasks", "50"], "--tasks: at least one task per member"),
    (["--cores", "99"], "--cores: between 0 (no budget) and"),
])
def test_consumer_stream_bench_refuses_bad_input_in_one_line(cli_env: dict[str, str], args: list[str],
                                                             message: str) -> None:
    assert message in refused(BENCH, args, cli_env)
