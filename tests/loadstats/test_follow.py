"""``groupcoord stats --follow`` as a service: metrics, failures it survives, a clean SIGTERM.

One follow process goes through every failure in turn (one JVM start instead of four): an
unreachable coordinator, a lost Spark session (its JVM killed), an unwritable state directory.
Each must be logged in one line and counted by kind, the next refresh must recover, and at the
end (SIGTERM, exit 0) the snapshot must equal a full rebuild of the whole log: nothing lost,
nothing counted twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.loadstats.job import run
from groupcoord.loadstats.snapshot_io import read_meta
from tests.deadlines import Deadline
from tests.listening import FOLLOW_METRICS_LINE, announced
from tests.loadstats.loadstats_testdata import make_reports, rows_of
from tests.loadstats.standalone import spark_env
from tests.loadstats.test_incremental import _assert_same_snapshot, _in_order_chunks
from tests.processes import stop_processes
from tests.zookeeper_server import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.heavy]

_DEADLINE_S = 240.0  # generous on a quiet machine (about 60 s in all), stretched by the load (tests/deadlines.py)


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _metric(port: int, name: str, **labels: str) -> float:
    return _scrape(port).get((name, tuple(sorted(labels.items()))), float("nan"))


def _wait(what: str, predicate: Callable[[], bool], proc: subprocess.Popen[str], log: Path) -> None:
    deadline = Deadline(_DEADLINE_S)  # a JVM's start and Spark's micro-batches: slower on a shared machine
    while not predicate():
        assert proc.poll() is None, f"follow exited ({proc.returncode}) waiting for {what}:\n{log.read_text()[-3000:]}"
        assert not deadline.passed(), f"no {what} in {deadline.elapsed():.0f} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.25)


def _write(samples: Path, name: str, rows: list[dict[str, Any]]) -> None:
    tmp = samples / f".{name}"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, samples / name)  # whole, as the sample log's files appear


def _java_children(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True) if p.name() == "java"]


def _lines(log: Path, text: str) -> list[str]:
    return [line for line in log.read_text().splitlines() if text in line]


def _rows_read(out: Path) -> int:
    try:
        return int(read_meta(str(out))["rows_read"])
    except (OSError, ValueError, KeyError):
        return -1


def _unwritable(directory: Path, on: bool) -> None:
    """No new entries in ``directory``; root ignores the mode bits, so root makes it immutable."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i" if on else "-i", str(directory)], check=True)
    else:
        directory.chmod(0o555 if on else 0o755)


def test_follow_survives_failures_counts_once_and_stops_on_sigterm(spark, tmp_path: Path) -> None:
    rows = rows_of(make_reports(seed=5, groups=("g1",), reports_per_worker=16, ts_range=8000))
    chunks = _in_order_chunks(rows, 4)
    samples, out = tmp_path / "samples", tmp_path / "snap"
    samples.mkdir()
    _write(samples, "samples-000.jsonl", chunks[0])
    coordinator = f"127.0.0.1:{free_port()}"  # nothing listens there yet (the port is kept free: free_port)
    log = tmp_path / "follow.log"
    command = [sys.executable, "-m", "groupcoord.cli", "stats", "--follow", "--every", "1s",
               "--samples", str(samples), "--out", str(out), "--master", "local[1]",
               "--metrics-listen", "127.0.0.1:0", "--coordinator", coordinator,
               "--publish-attempts", "2", "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g",
               "--conf", "spark.sql.shuffle.partitions=2",
               "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"]
    with log.open("w") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=spark_env(), text=True,
                                cwd=tmp_path, start_new_session=True)
    server: ServerThread | None = None
    versions = tmp_path / "snap.state" / "versions"
    try:
        metrics_port = int(announced(log, proc, FOLLOW_METRICS_LINE).rpartition(":")[2])  # it bound port 0

        def metric(name: str, **labels: str) -> float:
            try:
                return _metric(metrics_port, name, **labels)
            except OSError:
                return float("nan")

        # 1. the coordinator is unreachable: the snapshot is written, the publish fails after its tries
        _wait("first refresh", lambda: _rows_read(out) == len(chunks[0]), proc, log)
        _wait("publish failure", lambda: metric("groupcoord_stats_failures_total", kind="publish") >= 1, proc, log)
        assert len(_lines(log, "publish failed (publish)")) >= 1
        assert metric("groupcoord_stats_refreshes_total") == 1 and metric("groupcoord_stats_files_behind") == 0
        assert 0 <= metric("groupcoord_stats_snapshot_age_seconds") < _DEADLINE_S
        # ... and once it is up, the next refresh publishes
        server = ServerThread(listen=coordinator).start()
        AdminClient(coordinator).put_tasks("g1", ["t0"])
        _write(samples, "samples-001.jsonl", chunks[1])
        _wait("publish", lambda: metric("groupcoord_stats_published_total") >= 1, proc, log)
        published = AdminClient(coordinator).describe_group("g1", include_load_snapshot=True)
        assert published.load_snapshot.snapshot_id == read_meta(str(out))["snapshot_id"]

        # 2. the session's JVM is killed: one line, a new JVM, the next file folded in once
        (jvm,) = _java_children(proc.pid)
        jvm.kill()
        _wait("lost session", lambda: metric("groupcoord_stats_failures_total", kind="spark_session") >= 1, proc, log)
        _write(samples, "samples-002.jsonl", chunks[2])
        _wait("refresh on a new session", lambda: _rows_read(out) == sum(map(len, chunks[:3])), proc, log)
        assert [p.pid for p in _java_children(proc.pid)] != [jvm.pid]

        # 3. the state directory takes no new version: one line, counted; writable again, it recovers
        _unwritable(versions, True)
        try:
            _write(samples, "samples-003.jsonl", chunks[3])
            _wait("state failure", lambda: metric("groupcoord_stats_failures_total", kind="state_dir") >= 1,
                  proc, log)
            assert metric("groupcoord_stats_files_behind") == 1
        finally:
            _unwritable(versions, False)
        _wait("recovery", lambda: _rows_read(out) == len(rows), proc, log)
        assert metric("groupcoord_stats_files_behind") == 0
        assert metric("groupcoord_stats_rows_read_total") >= len(rows)
        # recovered: no failure comes after this. The unwritable directory failed every refresh that reached it
        # before the test made it writable again: one, or more if a retry (1 s later) beat the test to it
        counted = {kind: metric("groupcoord_stats_failures_total", kind=kind) for kind in ("spark_session", "state_dir")}

        # 4. SIGTERM: stops between micro-batches, exit 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text()[-3000:]
    finally:
        if versions.exists():
            _unwritable(versions, False)
        stop_processes([proc])
        # a JVM the killed session may have left; process_iter reads each process's name and command line once
        # and gives None for a zombie's (another test's JVM that has just exited: its cmdline() raises)
        for child in psutil.process_iter(["name", "cmdline"]):
            if child.info["name"] == "java" and str(tmp_path) in " ".join(child.info["cmdline"] or []):
                with contextlib.suppress(psutil.NoSuchProcess):  # gone since
                    child.kill()
        if server is not None:
            server.stop()

    text = log.read_text()
    assert counted["spark_session"] == 1, counted  # one JVM killed: one failure, then a new session
    for kind, count in counted.items():  # each failure in one line, as counted
        failed = _lines(log, f"refresh failed ({kind})")
        assert len(failed) == count >= 1, (kind, count, failed)
    assert "Traceback" not in text, text[-3000:]
    # the state is consistent and the snapshot is the state's: equal to a full rebuild, nothing twice
    current = json.loads((tmp_path / "snap.state" / "CURRENT").read_text())
    assert read_meta(str(out))["state_batch_id"] == current["batch_id"]
    assert [n for n in os.listdir(versions) if n.startswith(".")] == []
    run(str(samples), str(tmp_path / "full"), spark=spark)
    _assert_same_snapshot(str(out), str(tmp_path / "full"))
    assert current["rows_read"] == len(rows)


def test_follow_drops_py4j_own_tracebacks_and_nothing_else() -> None:
    """py4j logs a lost gateway through the root logger with a traceback (CI saw one after the JVM was killed)."""
    import logging

    import py4j.java_gateway

    from groupcoord.loadstats import follow

    def record(pathname: str) -> logging.LogRecord:
        return logging.getLogger().makeRecord("root", logging.ERROR, pathname, 1, "Exception while sending command.",
                                              (), None)

    assert not follow._drop_py4j_records(record(py4j.java_gateway.__file__))
    assert follow._drop_py4j_records(record(follow.__file__))
