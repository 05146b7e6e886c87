"""A split's log line names each child's parent (``lineage``): what a reader of the log (the fault
suite's ownership checker) needs to know that a child waits for its parent's release."""

from __future__ import annotations

import logging

import pytest

from groupcoord.coordinator.clock import FakeClock
from tests.coordinator.model.test_consumer_load import run
from tests.coordinator.model.test_consumer_split import (
    ASSIGN,
    HALVES,
    formed,
    fresh_assignor,  # noqa: F401 - a fresh pulsar-avg per test
    hot_snapshot,
    join,
    publish,
)


def test_the_split_line_names_each_child_s_parent(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    model, _ = formed(clock)
    publish(model, hot_snapshot(model, clock.wall_ms()))
    join(model, "c")
    with caplog.at_level(logging.INFO):
        run(model, model.fire(ASSIGN))
    [line] = [r for r in caplog.records if getattr(r, "event", "") == "tasks_split"]
    assert line.__dict__["lineage"] == {child: "orders" for child in HALVES}
