"""The job as a cluster runs it: ``spark-submit loadstats/job.py`` in a process of its own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from groupcoord.loadstats.samples import rows_to_table
from groupcoord.loadstats.snapshot_io import read_meta, read_snapshots
from tests.deadlines import run_within
from tests.loadstats.loadstats_testdata import make_reports, rows_of
from tests.paths import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.heavy]



def test_spark_submit_runs_the_job_unchanged(tmp_path: Path) -> None:
    rows = rows_of(make_reports(seed=3, groups=("g",), workers=2, reports_per_worker=8))
    (tmp_path / "samples").mkdir()
    pq.write_table(rows_to_table(rows), tmp_path / "samples" / "part-0.parquet")
    spark_submit = Path(sys.executable).parent / "spark-submit"  # installed with pyspark
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PYSPARK_GATEWAY_PORT", None)  # this process's own session must not be reused
    command = [
        str(spark_submit), "--master", "local[1]", "--driver-memory", "1g",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1",
        str(ROOT / "loadstats" / "job.py"), "--samples", str(tmp_path / "samples"), "--out", str(tmp_path / "snap"),
    ]
    done = run_within(command, 300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    # spark-submit passes the script's stderr (its log) through its own stdout: take the JSON line
    summary = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert summary["rows_read"] == len(rows) and summary["tasks"] == 6 and summary["workers"] == 2
    assert read_meta(str(tmp_path / "snap"))["snapshot_id"] == summary["snapshot_id"]
    assert set(read_snapshots(str(tmp_path / "snap"))["g"].tasks) == {f"t{i}" for i in range(6)}

    bad = run_within([*command[:-4], "--samples", str(tmp_path / "nope"), "--out", str(tmp_path / "x")], 300,
                     cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "does not exist" in bad.stdout + bad.stderr
