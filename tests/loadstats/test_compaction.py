"""The compacted archive: the rebuild from it equals the rebuild from the log; a crash loses nothing."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from groupcoord.loadstats import stream
from groupcoord.loadstats.job import run
from groupcoord.loadstats.state import StateStore
from groupcoord.loadstats.stream import default_state_path, run_incremental
from tests.loadstats.loadstats_testdata import make_reports, rows_of
from tests.loadstats.test_incremental import _assert_same_snapshot, _write

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SHORT, LONG = 3, 12


def _rows() -> list[dict[str, Any]]:
    """Rows in random order (colliding timestamps: ties broken by worker and figures), plus a
    task row of a worker that never reports (an unknown_worker reject in any rebuild)."""
    rows = rows_of(make_reports(seed=5, groups=("g1", "g2"), reports_per_worker=12, ts_range=40))
    random.Random(5).shuffle(rows)
    stray = dict(next(r for r in rows if r["task_id"] is not None), worker_id="w-never-reported")
    return [*rows, stray]


def _same_result(a: Any, b: Any) -> None:
    assert (a.rows_read, dict(a.rows_rejected), a.rows_duplicate, a.tasks, a.workers) == (
        b.rows_read, dict(b.rows_rejected), b.rows_duplicate, b.tasks, b.workers,
    )


def test_the_rebuild_from_the_archive_equals_the_rebuild_from_the_log(spark, tmp_path) -> None:
    rows = _rows()
    parts = [rows[i::4] for i in range(4)]
    samples, out = str(tmp_path / "samples"), str(tmp_path / "snap")
    for i, part in enumerate(parts[:3]):  # three incremental runs: three segments, merged as they come
        repeat = [parts[0][0]] if i == 2 else []  # a retried report, in another file than the first
        _write(samples, f"samples-{i:03d}.jsonl", part + repeat, ("not json",) if i == 1 else ())
        run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    store = StateStore(default_state_path(out))
    listed = store.current().meta["compacted"]["segments"]  # type: ignore[union-attr]
    assert sorted(os.listdir(store.segments)) == sorted(listed)  # merged-away segments are gone
    _write(samples, "samples-003.jsonl", parts[3])  # newer than the state: read from the log

    archived = run(samples, str(tmp_path / "a"), spark=spark, short_samples=SHORT, long_samples=LONG,
                   state_path=store.root)
    logged = run(samples, str(tmp_path / "b"), spark=spark, short_samples=SHORT, long_samples=LONG, use_archive=False,
                 state_path=store.root)
    assert archived.extra["source"] == "archive" and archived.extra["new_files"] == 1
    assert logged.extra["source"] == "log"
    _same_result(archived, logged)
    assert archived.rows_rejected["malformed"] == 1 and archived.rows_rejected["unknown_worker"] >= 1
    assert archived.rows_duplicate >= 1
    _assert_same_snapshot(str(tmp_path / "a"), str(tmp_path / "b"))

    # a file the archive holds is gone from the log (retention): the archive would count it, the log not
    os.remove(os.path.join(samples, "samples-000.jsonl"))
    fallback = run(samples, str(tmp_path / "a"), spark=spark, short_samples=SHORT, long_samples=LONG,
                   state_path=store.root)
    assert fallback.extra["source"] == "log"


def test_a_crash_during_compaction_loses_nothing_and_counts_nothing_twice(spark, tmp_path, monkeypatch) -> None:
    rows = _rows()
    samples, out = str(tmp_path / "samples"), str(tmp_path / "snap")
    _write(samples, "samples-000.jsonl", rows[::2])
    run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    _write(samples, "samples-001.jsonl", rows[1::2])
    store = StateStore(default_state_path(out))
    before = store.current()

    def crash(*_: Any) -> list[str]:  # the batch's segment is written and renamed into place, then the process dies
        raise OSError("simulated crash after the segment, before the state's commit")

    monkeypatch.setattr(stream, "add_segment", crash)
    with pytest.raises(Exception, match="simulated crash"):
        run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    monkeypatch.undo()
    assert store.current() == before  # not committed
    assert len(os.listdir(store.segments)) == 2  # the listed segment and the orphan
    # the rebuild now: the orphan does not count, and the second file is read from the log
    early = run(samples, str(tmp_path / "early"), spark=spark, short_samples=SHORT, long_samples=LONG,
                state_path=store.root)
    assert early.extra["source"] == "archive" and early.extra["new_files"] == 1
    assert early.rows_read == len(rows)

    resumed = run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    assert resumed.extra["batches"] == 1
    assert sorted(os.listdir(store.segments)) == sorted(store.current().meta["compacted"]["segments"])  # type: ignore[union-attr]
    archived = run(samples, str(tmp_path / "a"), spark=spark, short_samples=SHORT, long_samples=LONG,
                   state_path=store.root)
    logged = run(samples, str(tmp_path / "b"), spark=spark, short_samples=SHORT, long_samples=LONG, use_archive=False)
    assert archived.extra["source"] == "archive" and archived.extra["new_files"] == 0
    _same_result(archived, logged)
    _same_result(early, logged)
    assert archived.rows_read == len(rows)
    _assert_same_snapshot(str(tmp_path / "a"), str(tmp_path / "b"))
    _assert_same_snapshot(str(tmp_path / "early"), str(tmp_path / "b"))
