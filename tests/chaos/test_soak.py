"""One minute of the soak (`make chaos` runs ten with 1,000 members): 400 members in 10 groups with churn;
the coordinator's RSS does not grow past 5% after the warm-up and no heartbeating member expires.

400, not 1,000: this runs beside the rest of the suite (pytest-xdist, several workers on two cores), where
1,000 heartbeats a second overload the coordinator (p99 1 s was seen) and RSS then follows the calls
queued in gRPC (+12.8% in 40 s, with the answers 1 s late) instead of telling a leak.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.soak import report, soak

MEMBERS = 400


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.alone  # measures RSS and heartbeat latency: no neighbours
def test_one_minute_soak(tmp_path: Path) -> None:
    result = soak(1.0, members=MEMBERS, workdir=tmp_path, print_curve=False)
    print(report(result))
    assert result["spurious"] == []
    assert result["rss_growth"] < 0.05, report(result)
    assert result["heartbeats"] > MEMBERS * 20  # one a second each after the warm-up: the members really ran
