"""A worker cut off from the coordinator (its proxy black-holes every byte) past its session: the
coordinator gives its tasks to the others, and it must have stopped them before they start them
(eager and cooperative groups at once), then come back and settle."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.chaos.cluster import Timing
from tests.chaos.environments import SqliteEnv
from tests.chaos.run import EnvResult, run_env, violations
from tests.chaos.schedule import FaultSpec, Round


@pytest.mark.slow
@pytest.mark.heavy  # real processes behind a black-holing proxy: 17-23 s (the member rules' scenario rows cover the rule)
def test_a_worker_partitioned_past_its_session_stops_before_its_tasks_move(tmp_path: Path) -> None:
    timing = Timing()
    env = SqliteEnv(tmp_path, timing, groups=2, slots=3, tasks_per_group=6, rng=random.Random(0))
    hold = timing.session_s + 1.0
    rounds = [Round("sqlite", [FaultSpec("proxy_drop", "g0", 0, hold_s=hold, mode="blackhole"),
                               FaultSpec("proxy_drop", "g1", 1, hold_s=hold, mode="blackhole")])] * 2
    result = EnvResult("sqlite")
    run_env(env, rounds, result)
    assert violations([result]) == []
    assert result.report is not None
    moved = [g for g in result.report.gaps if g.fault is not None and g.fault.kind == "proxy_drop"]
    assert moved, "the partitioned workers' tasks moved (they were expelled)"
