"""The loop's lost time can be read back from the log: a line each time the total grew by a second,
and one with each stall over a second, both carrying the total (the fault suite's checker reads them)."""

from __future__ import annotations

import logging

import pytest

from groupcoord.coordinator.runtime.lag import LOGGED_EVERY_S, LagMonitor


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, float]]:
    return [(r.__dict__["event"], r.__dict__["lost_s"]) for r in caplog.records if r.name == "groupcoord.lag"]


def test_the_total_lost_is_logged_each_second_it_grows_and_with_each_long_stall(
        caplog: pytest.LogCaptureFixture) -> None:
    lag = LagMonitor(lambda: 0.0, slack_s=0.02, ticking=False)
    with caplog.at_level(logging.INFO, logger="groupcoord.lag"):
        for _ in range(9):
            lag.note(0.27)  # 0.25 s lost each: a line at 1.0 and 2.0, none in between
        lag.note(1.52)  # one stall over a second: its own line, with the total
        lag.note(0.52)  # 0.5 s since the last line: none
    assert lines(caplog) == [("loop_lost", 1.0), ("loop_lost", 2.0), ("loop_late", 3.75)]
    assert lag.lost() == pytest.approx(4.25)
    assert lag.lost() - lines(caplog)[-1][1] < LOGGED_EVERY_S  # what no line says yet is under the step


def test_lateness_within_the_slack_is_neither_lost_nor_logged(caplog: pytest.LogCaptureFixture) -> None:
    lag = LagMonitor(lambda: 0.0, slack_s=0.02, ticking=False)
    with caplog.at_level(logging.INFO, logger="groupcoord.lag"):
        for _ in range(200):
            lag.note(0.02)
    assert lag.lost() == 0.0 and lines(caplog) == []
