"""The held change in the consumer protocol, over real processes: a member is told to give a task up
(a newcomer joined) just as its heartbeats are black-holed, so it never hears it. The coordinator
hands that task on only once the member released it or its session ended; the member, hearing
nothing for its session less a margin, stops everything first. The ownership checker judges the
log: no task on two workers at once, none unowned past the bound.

The classic twins: test_partition.py (a partitioned worker) and test_cooperative_retry.py (a
cooperative worker cut off while it re-joins).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.chaos.cluster import Timing
from tests.chaos.environments import SqliteEnv
from tests.chaos.ownership import OwnershipLog
from tests.chaos.run import EnvResult, run_env, violations
from tests.chaos.schedule import FaultSpec, Round


@pytest.mark.slow
@pytest.mark.heavy
def test_a_consumer_worker_black_holed_mid_change_stops_before_its_tasks_move(tmp_path: Path) -> None:
    # an 8 s session: longer than a worker process takes to start and join on a loaded machine, so the
    # newcomer's change lands while w0 is cut off and still runs its tasks (rebalance timeout as long)
    timing = Timing(session_ms=8_000, rebalance_timeout_ms=8_000)
    # two workers, 3 tasks each; w1 is killed and restarted at once (the new process joins: the target
    # takes a task from w0) while w0's proxy black-holes every byte past its session
    env = SqliteEnv(tmp_path, timing, groups=1, slots=2, tasks_per_group=6, rng=random.Random(0),
                    group_protocol="consumer")
    hold = timing.session_s + 1.0
    rounds = [Round("sqlite", [FaultSpec("worker_kill", "g0", 1),
                               FaultSpec("proxy_drop", "g0", 0, hold_s=hold, mode="blackhole")])]
    result = EnvResult("sqlite")
    run_env(env, rounds, result)
    assert violations([result]) == []
    log = OwnershipLog.read(env.log_path)
    cut = next(f for f in log.faults if f.kind == "proxy_drop")
    stopped = {i.task: i.stop for intervals in log.intervals.values() for i in intervals
               if i.worker == "g0/w0#1" and cut.inject < i.stop < cut.heal}
    assert len(stopped) == 3, f"w0 stopped its 3 tasks by itself while cut off: {stopped}"
    joined = [json.loads(line)["ts"] for line in env.log_path.read_text().splitlines()
              if '"joined"' in line and '"g0/w1#2"' in line]
    assert joined and joined[0] < min(stopped.values()), "the newcomer joined (the change) while w0 still ran"
    for task, at in stopped.items():  # each ran again: moved on, or back to w0 once it rejoined
        assert any(i.start >= at for i in log.intervals[task]), f"{task} ran again after w0 stopped it"
