"""The pause detector both elections share, on a hand-driven clock."""

from __future__ import annotations

import pytest

from groupcoord.coordinator.ha.pauses import PauseDetector


def test_a_gap_over_max_pause_is_reported_once_and_ticks_keep_it_quiet() -> None:
    now = [100.0]
    pauses = PauseDetector(lambda: now[0], max_pause=1.0)
    now[0] += 0.9
    assert pauses.paused_for() is None
    pauses.tick()
    now[0] += 0.9  # 1.8 s since start, but ticked in between
    assert pauses.paused_for() is None
    now[0] += 2.0
    assert pauses.paused_for() == pytest.approx(2.9)
    assert pauses.paused_for() is None  # the same pause is not reported twice
