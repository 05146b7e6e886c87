"""One minute of the soak (`make chaos` runs ten): 1,000 members in 10 groups with churn; the
coordinator's RSS does not grow past 5% after the warm-up and no heartbeating member expires."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.soak import report, soak


@pytest.mark.slow
def test_one_minute_soak(tmp_path: Path) -> None:
    result = soak(1.0, workdir=tmp_path, print_curve=False)
    print(report(result))
    assert result["spurious"] == []
    assert result["rss_growth"] < 0.05, report(result)
    assert result["heartbeats"] > 20_000  # ~1,000 a second after the warm-up: the members really ran
