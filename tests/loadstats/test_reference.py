"""The sequential reference and its vectorised twin (no Spark)."""

from __future__ import annotations

import math

import pytest

from groupcoord.loadstats.reference import reference_arrow, reference_stats, reference_worker_stats, time_average
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, LoadReport, TaskLoad, report_rows, rows_to_table
from tests.loadstats.loadstats_testdata import make_reports, rows_of


def test_seed_worked_example() -> None:
    # seed §2.1: samples 1..5 with max 3 samples -> 1, 3/2, 2, 8/3, 31/9
    avg, n = time_average([1, 2, 3, 4, 5], 3)
    assert n == 3
    assert avg == pytest.approx(31 / 9, rel=1e-15)
    assert time_average([1, 2, 3], 3)[0] == pytest.approx(2.0)


def test_cap_one_is_last_value() -> None:
    assert time_average([5.0, 7.0, 9.0], 1) == (9.0, 1)
    with pytest.raises(ValueError):
        time_average([1.0], 0)


def test_report_rows_shape() -> None:
    report = LoadReport(ts_ms=5, cpu=(10, 400), tasks=[TaskLoad("a", 1, 2, 3, 4, 5, 6, 7)])
    rows = report_rows("g", "w", report)
    assert [r["task_id"] for r in rows] == [None, "a"]
    assert all(list(r) == list(SAMPLE_COLUMNS) for r in rows)
    assert rows[0]["cpu_usage"] == 10.0 and rows[0]["msg_rate_in"] is None
    assert rows[1]["cpu_usage"] is None and rows[1]["consumers"] == 7
    assert rows_to_table(rows).num_rows == 2


@pytest.mark.parametrize("caps", [(10, 1000), (3, 7), (1, 2)])
def test_vectorised_reference_equals_sequential(caps: tuple[int, int]) -> None:
    rows = rows_of(make_reports(seed=3))
    seq = reference_stats(rows, *caps)
    vec = {(r["group_id"], r["task_id"]): r for r in reference_arrow(rows_to_table(rows), *caps).to_pylist()}
    assert seq.keys() == vec.keys()
    for key, expected in seq.items():
        assert vec[key] == expected  # the same floating-point operations: bit-for-bit


def test_worker_reference_totals() -> None:
    rows = rows_of(make_reports(seed=4, groups=("g",), workers=2))
    tasks = reference_stats(rows)
    workers = reference_worker_stats(rows, tasks)
    assert sum(w["num_tasks"] for w in workers.values()) == len(tasks)
    total = math.fsum(t["long_msg_rate_in"] for t in tasks.values())
    assert math.fsum(w["long_msg_rate_in"] for w in workers.values()) == pytest.approx(total)
