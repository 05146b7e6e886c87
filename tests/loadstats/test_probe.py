"""The default psutil probe."""

from __future__ import annotations

import logging

import pytest

from groupcoord.loadstats.probe import LoadProbe, PsutilProbe
from groupcoord.loadstats.samples import LoadReport, TaskLoad


def test_psutil_probe_reports_sane_figures() -> None:
    tasks = [TaskLoad("a", 1.0, 2.0, 3.0, 4.0, 1, 1, 1)]
    probe = PsutilProbe(lambda: tasks, wall_clock_ms=lambda: 42)
    assert isinstance(probe, LoadProbe)
    report = probe.collect()
    assert isinstance(report, LoadReport) and report.ts_ms == 42
    assert report.tasks == tuple(tasks)
    assert report.cpu.limit > 0 and 0 <= report.cpu.usage <= report.cpu.limit * 1.01
    assert 0 < report.memory.usage <= report.memory.limit
    assert report.direct_memory == (0.0, 0.0)
    assert report.bandwidth_in.usage >= 0 and report.bandwidth_out.usage >= 0


def test_process_scope_and_bad_scope() -> None:
    report = PsutilProbe(scope="process").collect()
    assert report.memory.usage > 0 and report.tasks == ()
    with pytest.raises(ValueError):
        PsutilProbe(scope="cluster")  # type: ignore[arg-type]


def test_failing_callback_reports_last_good_tasks(caplog: pytest.LogCaptureFixture) -> None:
    calls = {"n": 0}

    def loads() -> list[TaskLoad]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("service bug")
        return [TaskLoad("a")]

    probe = PsutilProbe(loads)
    assert [t.task_id for t in probe.collect().tasks] == ["a"]
    with caplog.at_level(logging.ERROR, logger="groupcoord.loadstats.probe"):
        assert [t.task_id for t in probe.collect().tasks] == ["a"]
    assert "task_loads callback failed" in caplog.text
