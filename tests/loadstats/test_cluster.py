"""The job on a real Spark standalone cluster: a master and two workers, each a JVM of its own.

The sample log, the state and the snapshot live in one directory tree that the driver and every
executor see (here the same disk; on a cluster a shared filesystem or an object store path). The
results must equal the ``local[*]`` run's to 1e-9, and the cluster must show that executors in
the workers' JVMs did the work.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from groupcoord.loadstats.job import run
from groupcoord.loadstats.samples import rows_to_table
from groupcoord.loadstats.snapshot_io import read_meta
from tests.deadlines import run_within
from tests.loadstats.loadstats_testdata import make_reports, rows_of
from tests.loadstats.standalone import StandaloneCluster, spark_env, spark_home
from tests.loadstats.test_incremental import _assert_same_snapshot
from tests.paths import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.heavy]

#: Executors as small as the job allows: the workers offer 1 core and 1 GiB each.
_EXECUTOR_CONF = ("spark.executor.memory=512m", "spark.executor.cores=1", "spark.ui.enabled=false",
                  "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                  "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                  "spark.sql.shuffle.partitions=4")
#: One application (a driver JVM, two executors) on a quiet machine, with room: the whole test took 134 s at
#: load 3; at load 25 (four heavy tests at once, as CI's make test-heavy runs them) the incremental run was
#: still computing when a fixed 300 s ran out, so the deadline stretches with the load (tests/deadlines.py)
_APP_S = 300


def _write_log(samples: Path) -> int:
    rows = rows_of(make_reports(seed=11, groups=("g1", "g2"), reports_per_worker=20, ts_range=4000))
    samples.mkdir()
    half = len(rows) // 2
    pq.write_table(rows_to_table(rows[:half]), samples / "samples-000.parquet")
    (samples / "samples-001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[half:]) + "not json\n")
    return len(rows) + 1


def test_the_job_runs_on_a_standalone_cluster_and_equals_local(spark, tmp_path: Path) -> None:
    samples = tmp_path / "shared" / "samples"  # "shared": what every executor and the driver see
    samples.parent.mkdir()
    rows = _write_log(samples)
    conf = [arg for c in _EXECUTOR_CONF for arg in ("--conf", c)]
    with StandaloneCluster(tmp_path / "cluster") as cluster:
        # the full rebuild as a cluster runs it: spark-submit of the job's script
        submit = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url, "--driver-memory",
                  "512m", *conf, str(ROOT / "loadstats" / "job.py"), "--samples", str(samples), "--out",
                  str(tmp_path / "shared" / "full")]
        done = run_within(submit, _APP_S, cwd=tmp_path, env=spark_env())
        assert done.returncode == 0, done.stderr[-3000:] + cluster.logs_tail()
        # the incremental job (state + snapshot) through the CLI, with the cluster as its master
        stats = [sys.executable, "-m", "groupcoord.cli", "stats", "--master", cluster.master_url,
                 "--samples", str(samples), "--out", str(tmp_path / "shared" / "inc"), *conf]
        inc = run_within(stats, _APP_S, cwd=tmp_path, env=spark_env())
        assert inc.returncode == 0, inc.stderr[-3000:] + cluster.logs_tail()
        status = cluster.state()
        apps = [a["id"] for a in status["completedapps"]]
        assert len([w for w in status["workers"] if w["state"] == "ALIVE"]) == 2
        # every application had an executor in each worker's JVM (the worker writes its logs there)
        for app_id in apps:
            ran = cluster.executor_dirs(app_id)
            assert {p.parent.parent for p in ran} == {cluster.worker_dir(0), cluster.worker_dir(1)}, (app_id, ran)
            assert any("CoarseGrainedExecutorBackend" in (p / "stderr").read_text() for p in ran)
        assert len(apps) == 2, apps

    # one local run is enough: on one machine the incremental run equals the full one (test_incremental)
    local_full = tmp_path / "local-full"
    run(str(samples), str(local_full), spark=spark)
    _assert_same_snapshot(str(tmp_path / "shared" / "full"), str(local_full))
    _assert_same_snapshot(str(tmp_path / "shared" / "inc"), str(local_full))
    assert read_meta(str(tmp_path / "shared" / "full"))["rows_read"] == rows
    state = json.loads((tmp_path / "shared" / "inc.state" / "CURRENT").read_text())
    assert state["rows_read"] == rows and state["rows_rejected"]["malformed"] == 1
