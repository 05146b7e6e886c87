"""``pip install groupcoord`` without the ``stats`` extra: no pyarrow, no PySpark.

In a fresh interpreter where importing pyarrow, pyspark or py4j fails (as when they are not
installed), every module of the coordinator, the worker and the assignors imports, and so do
the wire and the light parts of ``loadstats``; the coordinator's sample log takes a report off
the wire, writes it as JSON Lines and rolls the file. Reading a snapshot's Parquet tables says
which extra is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BLOCKED = ("pyarrow", "pyspark", "py4j")

SCRIPT = textwrap.dedent(
    """
    import importlib, json, os, pkgutil, sys
    for name in {blocked!r}:
        sys.modules[name] = None  # "import pyarrow" (and pyarrow.anything) now raises ImportError

    imported = []
    for package in ("groupcoord.coordinator", "groupcoord.worker", "groupcoord.assignors"):
        module = importlib.import_module(package)
        imported.append(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            importlib.import_module(info.name)
            imported.append(info.name)
    for name in ("groupcoord.figures", "groupcoord.wire", "groupcoord.loadstats", "groupcoord.loadstats.sample_log",
                 "groupcoord.loadstats.snapshot_io", "groupcoord.loadstats.probe", "groupcoord.loadstats.report_policy"):
        importlib.import_module(name)
        imported.append(name)

    from groupcoord.v1 import groupcoord_pb2 as pb
    from groupcoord.wire import report_from_pb
    from groupcoord.loadstats.sample_log import SampleLog
    from groupcoord.loadstats.snapshot_io import read_snapshots

    directory = sys.argv[1]
    log = SampleLog(os.path.join(directory, "samples"), fsync_on_roll=False)
    report = pb.LoadReport(ts_ms=1000, cpu=pb.ResourceUsage(usage=50.0, limit=400.0),
                           tasks=[pb.TaskLoadReport(task_id="t1", msg_rate_in=5.0, topics=2)])
    log.append("g", "w1", report_from_pb(report))
    rolled = log.flush()
    log.close()

    snapshot = os.path.join(directory, "snapshot")
    os.makedirs(os.path.join(snapshot, "tasks"))
    with open(os.path.join(snapshot, "_meta.json"), "w") as f:
        json.dump({{"snapshot_id": "s1"}}, f)
    try:
        read_snapshots(snapshot)
        read_error = ""
    except ImportError as error:
        read_error = str(error)

    stats = log.stats()
    print(json.dumps({{
        "imported": imported,
        "heavy": sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r} and sys.modules[m] is not None),
        "rolled": rolled, "files_rolled": stats.files_rolled, "rows_written": stats.rows_written,
        "errors": stats.errors, "read_error": read_error,
    }}))
    """
).format(blocked=BLOCKED)


def test_service_modules_import_and_log_samples_without_pyarrow_or_pyspark(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["heavy"] == []
    assert {"groupcoord.coordinator.rpc.server", "groupcoord.coordinator.process.load_reports", "groupcoord.worker.client", "groupcoord.worker.load",
            "groupcoord.assignors.pulsar.assignors", "groupcoord.wire"} <= set(result["imported"])
    assert (result["rolled"], result["files_rolled"], result["rows_written"], result["errors"]) == (True, 1, 2, 0)
    (sample_file,) = (tmp_path / "samples").glob("samples-*.jsonl")
    rows = [json.loads(line) for line in sample_file.read_text().splitlines()]
    assert [(r["task_id"], r["cpu_limit"], r["msg_rate_in"], r["topics"]) for r in rows] == [
        (None, 400.0, None, None),
        ("t1", None, 5.0, 2),
    ]
    assert "groupcoord[stats]" in result["read_error"]
