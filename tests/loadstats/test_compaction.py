"""The compacted archive: the rebuild from it equals the rebuild from the log; a crash loses nothing."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from groupcoord.loadstats import state_fold
from groupcoord.loadstats.job import run
from groupcoord.loadstats.rebuild import rebuild_from_archive
from groupcoord.loadstats.state import StateStore
from groupcoord.loadstats.stream import default_state_path, run_incremental
from tests.loadstats.loadstats_testdata import make_reports, rows_of
from tests.loadstats.test_incremental import _assert_same_snapshot, _write

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.heavy]

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


def test_the_rebuild_from_the_archive_equals_the_log_and_a_crash_in_compaction_loses_nothing(
    spark, tmp_path, monkeypatch,
) -> None:
    rows = _rows()
    parts = [rows[i::4] for i in range(4)]
    samples, out = str(tmp_path / "samples"), str(tmp_path / "snap")
    store = StateStore(default_state_path(out))

    def rebuilds(name: str) -> Any:
        """The rebuild from the archive and from the log, compared; returns the archive's."""
        archived = run(samples, str(tmp_path / f"{name}-a"), spark=spark, short_samples=SHORT, long_samples=LONG,
                       state_path=store.root)
        logged = run(samples, str(tmp_path / f"{name}-b"), spark=spark, short_samples=SHORT, long_samples=LONG,
                     use_archive=False)
        assert archived.extra["source"] == "archive" and logged.extra["source"] == "log"
        _same_result(archived, logged)
        _assert_same_snapshot(str(tmp_path / f"{name}-a"), str(tmp_path / f"{name}-b"))
        return archived

    _write(samples, "samples-000.jsonl", parts[0], ("not json",))
    run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    before = store.current()

    # a crash after the batch's segment is written and renamed into place, before the state's commit
    def crash(*_: Any) -> list[str]:
        raise OSError("simulated crash after the segment, before the state's commit")

    _write(samples, "samples-001.jsonl", [*parts[1], parts[0][0]])  # a retried report, in another file
    monkeypatch.setattr(state_fold, "add_segment", crash)
    with pytest.raises(Exception, match="simulated crash"):
        run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    monkeypatch.undo()
    assert store.current() == before and len(os.listdir(store.segments)) == 2  # the listed one and the orphan
    early = rebuilds("early")  # the orphan does not count; the second file comes from the log
    assert early.extra["new_files"] == 1 and early.rows_read == len(parts[0]) + 1 + len(parts[1]) + 1
    assert early.rows_rejected["malformed"] == 1 and early.rows_duplicate >= 1

    # the re-run folds file 1 again (batch 1) and file 2 (batch 2, larger than each before it: the
    # three segments merge into one), and the orphan is gone; file 3 is newer than the state
    half = len(parts[3]) // 2
    _write(samples, "samples-002.jsonl", parts[2] + parts[3][:half])
    run_incremental(samples, out, spark=spark, short_samples=SHORT, long_samples=LONG)
    listed = store.current().meta["compacted"]["segments"]  # type: ignore[union-attr]
    assert len(listed) == 1 and os.listdir(store.segments) == listed
    _write(samples, "samples-003.jsonl", parts[3][half:])
    late = rebuilds("late")
    assert late.extra["new_files"] == 1 and late.rows_read == len(rows) + 2
    assert late.rows_rejected["unknown_worker"] >= 1

    # a file the archive holds is gone from the log (retention): the archive would count it, the log not
    os.remove(os.path.join(samples, "samples-000.jsonl"))
    assert rebuild_from_archive(spark, samples, out, short_samples=SHORT, long_samples=LONG,
                                max_sample_age_s=None) is None
