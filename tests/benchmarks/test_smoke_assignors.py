"""The assignor benchmark runs end to end at toy size (``--quick``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from groupcoord import assignors
from tests.deadlines import run_within
from tests.paths import ROOT
from tests.scripts import load_script

BENCH = ROOT / "benchmarks" / "assignors_bench.py"


@pytest.mark.heavy  # a benchmark run at small size (make test-heavy runs the benchmark smokes; CI runs both)
def test_assignors_bench_quick_runs() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(assignors.__file__).parent.parent))
    done = run_within([sys.executable, str(BENCH), "--quick"], 120, env=env)
    assert done.returncode == 0, done.stderr
    for expected in (
        "replica shift fn, 10 racks",
        "kafka-replica-shift assignor",
        "sticky, one member joins",
        "kafka-python",
        "every built-in assignor at the size of a large group",
        "pulsar-threshold",
        "sticky, incremental",
        "balanced, incremental",
        "pulsar-avg, incremental",
        "round-robin, full pass",
        "one member joins, snapshot read",
    ):
        assert expected in done.stdout, done.stdout


def load_bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    return load_script(BENCH, monkeypatch=monkeypatch)


def test_the_server_side_target_rows_at_small_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every assignor with an incremental target gets a full and an incremental row that agree on
    balance and movement (the incremental path taken, not declined); round-robin its full pass only."""
    bench = load_bench(monkeypatch)
    rows = {row.implementation: row for row in bench.server_target_rows(600, 12, 1)}
    for name in bench.TARGET_ASSIGNORS:
        full = rows.pop(f"{name}, full pass")
        if name == "round-robin":
            assert "no incremental form" in full.note
            continue
        incremental = rows.pop(f"{name}, incremental")
        assert (incremental.max_over_mean, incremental.moved) == (full.max_over_mean, full.moved), name
        assert incremental.note.startswith("CPU ")
    assert not rows
    # under a snapshot a full pass read, and tasks added at the end: each pair agrees too (the rows assert
    # that the incremental path was taken)
    later = bench.snapshot_target_rows(600, 12, 1) + bench.appended_target_rows(600, 12, 1, added=20)
    pairs = {row.implementation: row for row in later}
    for name in (*bench.SNAPSHOT_ASSIGNORS, "kafka-replica-shift"):
        full, incremental = pairs[f"{name}, full pass"], pairs[f"{name}, incremental"]
        assert (incremental.max_over_mean, incremental.moved) == (full.max_over_mean, full.moved), name


def test_kafka_python_column_is_skipped_with_a_note_when_missing(monkeypatch) -> None:
    bench = load_bench(monkeypatch)
    monkeypatch.setattr(bench, "KAFKA_PYTHON", None)
    _, plan = bench.ours_rows(20, 3, 1)
    (row,) = bench.kafka_python_rows(20, plan, 1.0)
    assert row.seconds is None and "skipped: kafka-python not importable" in row.note
