"""``groupcoord serve --snapshots PATH``: the coordinator picks up the snapshots a scheduled job writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from groupcoord.admin import AdminClient
from groupcoord.loadstats.job import TASK_COLUMNS, WORKER_COLUMNS, _swap_into_place
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.listening import announced
from tests.processes import stop_processes


def write_snapshot(out: Path, snapshot_id: str, created_ms: int, group: str, rate: float) -> None:
    """A snapshot as the job lays it out (Parquet tables, ``_meta.json``, the atomic link swap)."""
    tmp = out.parent / f".tmp-{snapshot_id}"
    (tmp / "tasks").mkdir(parents=True)
    (tmp / "workers").mkdir()
    task = {c: 0.0 for c in TASK_COLUMNS} | {
        "group_id": group, "task_id": "t1", "worker_id": "w1", "short_samples": 3, "long_samples": 3,
        "short_msg_rate_in": rate, "long_msg_rate_in": rate, "topics": 1, "producers": 1, "consumers": 1,
        "split_candidate": False,
    }
    worker = {c: 0.0 for c in WORKER_COLUMNS} | {
        "group_id": group, "worker_id": "w1", "num_tasks": 1, "long_msg_rate_in": rate, "cpu_usage": 12.5,
        "cpu_limit": 100.0, "ts_ms": created_ms,
    }
    pq.write_table(pa.Table.from_pylist([task]), tmp / "tasks" / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist([worker]), tmp / "workers" / "part-0.parquet")
    (tmp / "_meta.json").write_text(json.dumps({"snapshot_id": snapshot_id, "created_ms": created_ms}))
    _swap_into_place(str(tmp), str(out), snapshot_id)


def snapshot_of(admin: AdminClient, group: str) -> pb.LoadSnapshot:
    described = admin._call("DescribeGroup", pb.DescribeGroupRequest(group_id=group, include_load_snapshot=True))
    return described.load_snapshot


def wait_for_snapshot(admin: AdminClient, group: str, snapshot_id: str, timeout_s: float = 20) -> pb.LoadSnapshot:
    deadline = time.monotonic() + timeout_s
    while (snap := snapshot_of(admin, group)).snapshot_id != snapshot_id:
        assert time.monotonic() < deadline, f"snapshot {snapshot_id} not picked up (have {snap.snapshot_id!r})"
        time.sleep(0.05)  # polling with a deadline
    return snap


def test_serve_picks_up_new_snapshots_and_survives_bad_ones(tmp_path: Path, cli_env: dict[str, str]) -> None:
    out = tmp_path / "shared" / "snapshot"
    out.parent.mkdir()
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115 - the child writes to it for its whole life
    serve = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--snapshots", str(out), "--snapshot-poll-s", "0.1"],
        stdout=subprocess.DEVNULL, stderr=log, text=True, env=cli_env,
    )
    try:
        address = announced(tmp_path / "serve.log", serve, seconds=180)  # a process start: 60 s at load 33
    except AssertionError:
        stop_processes([serve])
        raise
    admin = AdminClient(address, timeout_s=5)
    try:
        deadline = time.monotonic() + 180  # a process start: at load 33 (niced) it took over 60 s
        while True:  # nothing at the path yet: the coordinator serves regardless
            try:
                admin.put_tasks("g", ["t1"])
                break
            except Exception:  # noqa: BLE001 - not listening yet
                assert serve.poll() is None and time.monotonic() < deadline, "coordinator did not start"
                time.sleep(0.1)
        # the watcher imports its Parquet reader first (2.9 s of CPU: a start-up, bounded by the machine);
        # from then on a snapshot is applied a poll after it lands (the 20 s below)
        deadline = time.monotonic() + 120
        while "for load snapshots every" not in (tmp_path / "serve.log").read_text():
            assert serve.poll() is None and time.monotonic() < deadline, "the snapshot watcher did not start"
            time.sleep(0.05)

        write_snapshot(out, "001-aaaa", 1_000, "g", rate=10.0)
        snap = wait_for_snapshot(admin, "g", "001-aaaa")
        assert snap.tasks[0].task_id == "t1" and snap.tasks[0].long_msg_rate_in == 10.0
        assert snap.workers[0].cpu_usage == 12.5

        write_snapshot(out, "002-bbbb", 2_000, "g", rate=20.0)  # the next run of the job
        assert wait_for_snapshot(admin, "g", "002-bbbb").tasks[0].long_msg_rate_in == 20.0

        # a broken version: logged, the group keeps the snapshot it had, the coordinator keeps serving
        broken = out.parent / ".tmp-broken"
        (broken / "tasks").mkdir(parents=True)
        (broken / "tasks" / "part-0.parquet").write_bytes(b"not parquet")
        (broken / "_meta.json").write_text(json.dumps({"snapshot_id": "003-cccc", "created_ms": 3_000}))
        _swap_into_place(str(broken), str(out), "003-cccc")
        deadline = time.monotonic() + 20
        while "cannot read the load snapshot" not in (tmp_path / "serve.log").read_text():
            assert time.monotonic() < deadline, "the bad snapshot was not reported"
            time.sleep(0.05)
        assert snapshot_of(admin, "g").snapshot_id == "002-bbbb"

        # a group created after the snapshot was written gets it on the next poll
        write_snapshot(out, "004-dddd", 4_000, "late", rate=5.0)
        admin.put_tasks("late", ["t1"])
        wait_for_snapshot(admin, "late", "004-dddd")
        assert snapshot_of(admin, "g").snapshot_id == "002-bbbb"  # a snapshot without g changes nothing for g
    finally:
        admin.close()
        stop_processes([serve])
        log.close()
    assert serve.returncode == 0
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_bad_snapshot_poll_interval_is_one_line(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--data-dir", str(tmp_path), "--snapshots", str(tmp_path),
         "--snapshot-poll-s", "0"],
        capture_output=True, text=True, env=cli_env, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["groupcoord serve: snapshot_poll_s must be > 0, not 0.0"]
    assert os.listdir(tmp_path) == [] or "groups.db" not in os.listdir(tmp_path)
