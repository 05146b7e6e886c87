"""The coordinator's sample log: concurrent reporters, rolling, bad paths, drops, recovery."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from groupcoord.loadstats.sample_log import SampleLog
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, LoadReport, ResourceUsage, TaskLoad


def _report(i: int, n_tasks: int = 2) -> LoadReport:
    return LoadReport(
        ts_ms=i,
        cpu=ResourceUsage(float(i), 400.0),
        tasks=tuple(TaskLoad(f"t{j}", float(i), 1.0, 2.0, 3.0, 1, 1, 1) for j in range(n_tasks)),
    )


def _visible(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if not n.startswith((".", "_")))


def _read_rows(directory: str) -> list[dict]:
    rows = []
    for name in _visible(directory):
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                rows.append(json.loads(line))
    return rows


def test_concurrent_writers_roll_by_size(tmp_path) -> None:
    d = str(tmp_path / "samples")
    threads_n, per_thread = 8, 250
    with SampleLog(d, roll_bytes=20_000, queue_size=100_000, batch_size=16) as slog:

        def work(t: int) -> None:
            for i in range(per_thread):
                slog.append("g", f"w{t}", _report(i))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert slog.flush(timeout=30)
        stats = slog.stats()
    rows = _read_rows(d)
    expected = threads_n * per_thread * 3
    assert stats.rows_written == expected and stats.rows_dropped == 0 and stats.errors == 0
    assert len(rows) == expected
    assert all(list(r) == list(SAMPLE_COLUMNS) for r in rows)
    assert len(_visible(d)) > 5 and stats.files_rolled == len(_visible(d))
    # every worker's reports all arrived, in its own order
    for t in range(threads_n):
        ts = [r["ts_ms"] for r in rows if r["worker_id"] == f"w{t}" and r["task_id"] is None]
        assert ts == list(range(per_thread))
    assert not [n for n in os.listdir(d) if n.endswith(".inprogress")]


def test_roll_by_time_on_fake_clock(tmp_path) -> None:
    now = [0.0]
    d = str(tmp_path)
    slog = SampleLog(d, roll_seconds=10.0, clock=lambda: now[0])
    try:
        slog.append("g", "w", _report(1))
        # nothing visible until the file rolls
        assert slog.flush(timeout=10)  # flush rolls
        assert len(_visible(d)) == 1
        slog.append("g", "w", _report(2))
        deadline = threading.Event()
        for _ in range(200):  # wait until written into the in-progress file
            if slog.stats().rows_written == 6:
                break
            deadline.wait(0.01)
        assert len(_visible(d)) == 1
        now[0] = 11.0  # the writer wakes at least every second and rolls by age
        for _ in range(300):
            if len(_visible(d)) == 2:
                break
            deadline.wait(0.01)
        assert len(_visible(d)) == 2
    finally:
        slog.close()


def test_queue_full_drops_and_counts(tmp_path) -> None:
    gate = threading.Event()
    slog = SampleLog(str(tmp_path), queue_size=2, batch_size=1)
    original = slog._write  # block the writer so the queue fills up

    def slow_write(batch):  # type: ignore[no-untyped-def]
        gate.wait(10)
        original(batch)

    slog._write = slow_write  # type: ignore[method-assign]
    try:
        for i in range(50):
            slog.append("g", "w", _report(i, n_tasks=1))  # never blocks
        stats = slog.stats()
        assert stats.reports_dropped >= 40 and stats.rows_dropped == 2 * stats.reports_dropped
    finally:
        gate.set()
        slog.close()
    assert slog.stats().reports_written + slog.stats().reports_dropped == 50
    slog.append("g", "w", _report(99))  # after close: dropped, no exception
    assert slog.stats().reports_dropped >= 41


def test_bad_path_is_counted_not_raised(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    slog = SampleLog(str(blocker / "samples"))
    try:
        for i in range(5):
            slog.append("g", "w", _report(i))
        slog.flush(timeout=10)
        stats = slog.stats()
        assert stats.errors >= 1 and stats.rows_failed == 15 and stats.rows_written == 0
        assert stats.last_error and "write failed" in stats.last_error
    finally:
        slog.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory(tmp_path) -> None:  # pragma: no cover - CI runs as root here
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    with SampleLog(str(d)) as slog:
        slog.append("g", "w", _report(1))
        slog.flush(timeout=10)
        assert slog.stats().errors >= 1


def test_write_error_then_recovery(tmp_path) -> None:
    d = tmp_path / "later"
    slog = SampleLog(str(d))
    try:
        d.parent.chmod(0o755)
        (tmp_path / "later").write_text("blocks mkdir")  # a file where the directory should be
        slog.append("g", "w", _report(1))
        slog.flush(timeout=10)
        assert slog.stats().errors >= 1
        os.unlink(d)  # the operator fixes the path: the next batch goes through
        slog.append("g", "w", _report(2))
        assert slog.flush(timeout=10)
        assert slog.stats().rows_written == 3
    finally:
        slog.close()
    assert [r["ts_ms"] for r in _read_rows(str(d)) if r["task_id"] is None] == [2]


def test_orphan_of_dead_process_is_recovered(tmp_path) -> None:
    dead_pid = 2**22 + 12345  # above Linux's default pid_max
    name = f".samples-000000000000001-{dead_pid}-000001-deadbeef.jsonl.inprogress"
    (tmp_path / name).write_bytes(b'{"ts_ms": 1}\n{"ts_ms": 2, "grou')
    SampleLog(str(tmp_path)).close()
    assert _visible(str(tmp_path)) == [f"samples-000000000000001-{dead_pid}-000001-deadbeef.jsonl"]
    assert _read_rows(str(tmp_path)) == [{"ts_ms": 1}]


def test_retention_by_age_and_size_logs_what_it_drops(tmp_path, caplog) -> None:
    d = str(tmp_path)
    day_ms = 24 * 3600 * 1000
    now_ms = [10 * day_ms]
    # finished files of an earlier process: 3 days, 2 days and 1 hour old, 1000 bytes each
    for age_ms, seq in ((3 * day_ms, 1), (2 * day_ms, 2), (3_600_000, 3)):
        with open(os.path.join(d, f"samples-{now_ms[0] - age_ms:015d}-1-{seq:06d}-cafe.jsonl"), "w") as f:
            f.write("x" * 999 + "\n")
    with open(os.path.join(d, "keep-me.parquet"), "w") as f:  # not the log's: never touched
        f.write("y" * 5000)
    with caplog.at_level("WARNING", logger="groupcoord.loadstats.sample_log"):
        slog = SampleLog(d, retention_s=36 * 3600, retention_bytes=1500, wall_clock_ms=lambda: now_ms[0])
    try:
        # age drops the 3- and 2-day-old files at start
        assert slog.stats().files_dropped == 2 and slog.stats().bytes_dropped == 2000
        assert any("retention dropped 2 file(s), 2000 bytes" in r.getMessage() for r in caplog.records)
        slog.append("g", "w", _report(1))
        assert slog.flush()
        # size: the new file plus the 1-hour-old one exceed 1500 bytes, the older goes; the newest stays
        names = _visible(d)
        assert len([n for n in names if n.startswith("samples-")]) == 1 and "keep-me.parquet" in names
        assert slog.stats().files_dropped == 3
    finally:
        slog.close()


def test_retention_off_keeps_everything(tmp_path) -> None:
    with SampleLog(str(tmp_path), retention_s=None, retention_bytes=None) as slog:
        for i in range(3):
            slog.append("g", "w", _report(i))
            assert slog.flush()
    assert len(_visible(str(tmp_path))) == 3 and slog.stats().files_dropped == 0
    with pytest.raises(ValueError):
        SampleLog(str(tmp_path), retention_s=0)


def test_serve_options_carry_retention(tmp_path) -> None:
    import argparse

    from groupcoord.cli.stats import duration_s
    from groupcoord.coordinator.process.serve import ServeOptions

    config = tmp_path / "c.toml"
    config.write_text("[server]\nsample_retention_s = 3600\nsample_retention_bytes = 1000000\n")
    blank = dict.fromkeys(("listen", "data_dir", "store", "zk", "advertise", "snapshots", "snapshot_poll_s",
                           "sample_retention_s", "sample_retention_bytes", "initial_rebalance_delay_ms"))
    options = ServeOptions.from_args(argparse.Namespace(config=str(config), **blank))
    assert (options.sample_retention_s, options.sample_retention_bytes) == (3600.0, 1_000_000)
    flags = ServeOptions.from_args(argparse.Namespace(config=None, **{**blank, "sample_retention_bytes": 0}))
    assert flags.sample_retention_bytes == 0 and flags.sample_retention_s == 7 * 24 * 3600.0
    with pytest.raises(ValueError, match="sample_retention"):
        ServeOptions.from_args(argparse.Namespace(config=None, **{**blank, "sample_retention_bytes": -1}))
    assert [duration_s(t) for t in ("60", "60s", "2m", "1.5h")] == [60.0, 60.0, 120.0, 5400.0]
    with pytest.raises(argparse.ArgumentTypeError):
        duration_s("0s")


def test_queued_rows_are_bounded_however_large_the_reports(tmp_path) -> None:
    """The queue holds at most ``max_queued_rows`` rows (a report and its task entries): large
    reports arriving faster than the writer drains them are dropped and counted, not kept."""
    gate = threading.Event()
    slog = SampleLog(str(tmp_path), queue_size=1_000, max_queued_rows=250, batch_size=1)
    original = slog._write

    def slow_write(batch):  # type: ignore[no-untyped-def]
        gate.wait(10)
        original(batch)

    slog._write = slow_write  # type: ignore[method-assign]
    made: list[int] = []

    def lazily(i: int):  # type: ignore[no-untyped-def]
        def make() -> LoadReport:
            made.append(i)
            return _report(i, n_tasks=99)
        return make

    try:
        for i in range(10):
            slog.append("g", "w", lazily(i), 99)  # 100 rows each
        stats = slog.stats()
        # the writer holds one batch; two more fit the 250-row budget; the rest are dropped
        assert stats.reports_dropped >= 6 and stats.rows_dropped == 100 * stats.reports_dropped
    finally:
        gate.set()
        slog.close()
    assert slog.stats().reports_written == len(made) == 10 - slog.stats().reports_dropped
    assert len(_read_rows(str(tmp_path))) == 100 * len(made)  # made on the writer thread, all written
