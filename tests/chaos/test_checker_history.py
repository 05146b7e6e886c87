"""The ownership checker on recorded histories, with what the coordinators' logs say: a loop that ran
late and a shard move that no fault forced stretch the gap bound by their own measured time (a real
gap past that is still one), and a split's child waits for its parent's release (a child run while
another member still runs the parent is a double run)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from groupcoord.coordinator.runtime.shard_map import shard_of
from tests.chaos.coordinator_log import CoordinatorHistory, Move
from tests.chaos.ownership import OwnershipLog, check, event

SESSION, REBALANCE, HEARTBEAT = 2.0, 3.0, 0.25
BOUND = SESSION + REBALANCE
SHARDS = 12
G0_SHARD = shard_of("g0", SHARDS)


def start(ts: float, worker: str, *tasks: str) -> str:
    return event("assigned", ts, worker=worker, member_id=worker + "-m", generation=1, tasks=list(tasks))


def stop(ts: float, worker: str, *tasks: str) -> str:
    return event("revoked", ts, worker=worker, tasks=list(tasks))


def fault(ts: float, fid: int, kind: str, phase: str, target: str, group: str = "g0") -> str:
    return event("fault", ts, id=fid, kind=kind, phase=phase, target=target, group=group)


def said(ts: float, what: str, message: str = "", **fields: object) -> str:
    """One line of a coordinator's JSON log."""
    stamp = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return json.dumps({"ts": stamp, "level": "info", "logger": "groupcoord", "message": message, "event": what,
                       **fields})


def judge(lines: list[str], history: CoordinatorHistory | None = None) -> list[str]:
    log = OwnershipLog.parse(lines)
    return check(log, session_s=SESSION, rebalance_timeout_s=REBALANCE, heartbeat_s=HEARTBEAT, since=0.5,
                 history=history).violations


T0 = 1_800_000_000.0  # wall-clock seconds, as the logs carry them


def killed_then_taken(at: float) -> list[str]:
    """g0/w0 runs t0, is SIGKILLed at +2 (healed at +2.2: restarted under a new name), g0/w1 takes t0 at ``at``."""
    return [start(T0 + 1, "g0/w0#1", "g0-t0"), fault(T0 + 2, 1, "worker_kill", "inject", "g0/w0#1"),
            fault(T0 + 2.2, 1, "worker_kill", "heal", "g0/w0#2"), start(at, "g0/w1#1", "g0-t0"), event("end", T0 + 30)]


def late_loop() -> CoordinatorHistory:
    """The coordinator's loop lost 3 s while t0 was unowned: 1 s, then a 2 s stall."""
    return CoordinatorHistory.parse({"c0": [
        said(T0 + 3, "loop_lost", lost_s=1.0),
        said(T0 + 5, "loop_late", lost_s=3.0, late_s=2.0),
        "a line that is not JSON (a traceback's)",
    ]})


def test_a_loop_that_ran_late_stretches_the_bound_by_what_it_lost() -> None:
    within = killed_then_taken(T0 + 2.2 + BOUND + 3.0 - 0.1)
    assert len(judge(within)) == 1  # on a quiet machine's bound: a gap
    assert judge(within, late_loop()) == []  # the coordinator extended the session by the 3 s it lost


def test_a_gap_past_the_lost_time_too_is_still_a_gap() -> None:
    (problem,) = judge(killed_then_taken(T0 + 2.2 + BOUND + 3.0 + 0.1), late_loop())
    assert "0.10s past the bound, 3.00s of loop lost" in problem and "after worker_kill" in problem


def test_lost_time_outside_the_gap_does_not_count() -> None:
    earlier = CoordinatorHistory.parse({"c0": [said(T0 + 0.2, "loop_late", lost_s=3.0, late_s=3.0)]})
    assert len(judge(killed_then_taken(T0 + 2.2 + BOUND + 1.0), earlier)) == 1


def test_a_restarted_coordinator_counts_from_zero_and_the_totals_chain() -> None:
    history = CoordinatorHistory.parse({"c0": [said(T0 + 1, "loop_lost", lost_s=2.0),
                                               said(T0 + 3, "loop_lost", lost_s=4.0),
                                               said(T0 + 6, "loop_lost", lost_s=1.0),  # a new process
                                               said(T0 + 9, "loop_lost", lost_s=2.0)],
                                        "c1": [said(T0 + 4, "loop_late", lost_s=1.5)]})
    # c0: 2.0 before the start, 6.0 (4 + 1 + 1, chained over the restart) at its first line after the end
    assert history.lost_between(T0 + 2, T0 + 8) == pytest.approx(4.0)
    assert history.lost_between(T0 + 3.5, T0 + 4) == pytest.approx(1.5)  # c1's (c0's: 1.0): the most of any one
    assert history.lost_between(T0 + 9.5, T0 + 20) == 0.0  # nothing said since: under a second


def office(ts: float, what: str, shard: int | None, term: int = 1) -> str:
    label = f"shard {shard}: " if shard is not None else ""
    text = "in office" if what == "in_office" else "out of office"
    return said(ts, what, f"{label}{text} (term {term}): 1 group(s)", term=term)


def moved(shard: int) -> CoordinatorHistory:
    """``shard`` left c0 at +3 (a ZooKeeper session lost: no fault) and c1 loaded it at +6."""
    return CoordinatorHistory.parse({"c0": [office(T0 + 0.5, "in_office", shard), office(T0 + 3, "unloaded", shard)],
                                     "c1": [office(T0 + 6, "in_office", shard, term=2)]}, shards=SHARDS)


def left_then_taken(at: float) -> list[str]:
    """g0/w0 gives t0 up at +2 (its process exits cleanly: no fault), g0/w1 takes it at ``at``."""
    return [start(T0 + 1, "g0/w0#1", "g0-t0"), stop(T0 + 2, "g0/w0#1", "g0-t0"), start(at, "g0/w1#1", "g0-t0"),
            event("end", T0 + 30)]


def test_a_gap_during_a_shard_move_counts_from_the_move_s_end() -> None:
    assert moved(G0_SHARD).moves == [Move(G0_SHARD, T0 + 3, T0 + 6)]
    lines = left_then_taken(T0 + 6 + BOUND - 0.1)
    assert len(judge(lines)) == 1
    assert judge(lines, moved(G0_SHARD)) == []
    (problem,) = judge(left_then_taken(T0 + 6 + BOUND + 0.1), moved(G0_SHARD))
    assert "counted from a shard move" in problem


def test_a_move_of_another_shard_does_not_stretch_the_bound() -> None:
    assert len(judge(left_then_taken(T0 + 6 + BOUND - 0.1), moved((G0_SHARD + 1) % SHARDS))) == 1


def test_a_killed_leader_s_shards_move_from_its_kill_and_a_paused_one_s_late_line_is_no_move() -> None:
    killed = CoordinatorHistory.parse({"c0": [office(T0, "in_office", 4)], "c1": [office(T0 + 5, "in_office", 4)]},
                                      shards=SHARDS, kills=[(T0 + 2, "c0")])
    assert killed.moves == [Move(4, T0 + 2, T0 + 5)]
    # c0 SIGSTOPped: c1 took the shard at +4, c0 woke and logged its unload at +5; c1 leads all along
    paused = CoordinatorHistory.parse({"c0": [office(T0, "in_office", 4), office(T0 + 5, "unloaded", 4)],
                                       "c1": [office(T0 + 4, "in_office", 4), office(T0 + 9, "unloaded", 4)],
                                       "c2": [office(T0 + 10, "in_office", 4)]}, shards=SHARDS)
    assert paused.moves == [Move(4, T0 + 9, T0 + 10)]


def lineage(**children: str) -> CoordinatorHistory:
    return CoordinatorHistory.parse({"c0": [said(T0, "tasks_split", lineage=children)]})


SPLIT = lineage(**{"g0-t0a": "g0-t0", "g0-t0b": "g0-t0"})


def test_a_child_owned_right_after_its_parent_is_released_is_correct() -> None:
    lines = [start(T0 + 1, "g0/w0#1", "g0-t0"), stop(T0 + 2, "g0/w0#1", "g0-t0"),
             start(T0 + 2.1, "g0/w1#1", "g0-t0a"), start(T0 + 2.2, "g0/w0#1", "g0-t0b"), event("end", T0 + 30)]
    assert len(judge(lines)) == 1  # without the lineage: the parent unowned from +2 to the end
    assert judge(lines, SPLIT) == []


def test_a_child_owned_while_its_parent_still_runs_elsewhere_is_a_double_run() -> None:
    lines = [start(T0 + 1, "g0/w0#1", "g0-t0"), start(T0 + 2, "g0/w1#1", "g0-t0a"),
             stop(T0 + 2.5, "g0/w0#1", "g0-t0"), start(T0 + 2.6, "g0/w2#1", "g0-t0b"), event("end", T0 + 30)]
    assert judge(lines, lineage(**{"g0-t0b": "g0-t0"})) == []  # t0a not a child: no overlap is seen
    (problem,) = judge(lines, SPLIT)
    assert problem.startswith("overlap g0-t0a (split from g0-t0): g0/w1#1") and "no SIGSTOP" in problem


def test_the_same_member_may_hold_a_parent_and_its_child_and_a_grandchild_waits_for_the_parent() -> None:
    history = lineage(**{"g0-t0a": "g0-t0", "g0-t0a1": "g0-t0a"})
    same = [start(T0 + 1, "g0/w0#1", "g0-t0"), start(T0 + 2, "g0/w0#1", "g0-t0a"), stop(T0 + 2.5, "g0/w0#1", "g0-t0"),
            event("end", T0 + 30)]
    assert judge(same, history) == []
    grandchild = [start(T0 + 1, "g0/w0#1", "g0-t0"), start(T0 + 2, "g0/w1#1", "g0-t0a1"), event("end", T0 + 30)]
    (problem,) = judge(grandchild, history)
    assert "g0-t0a1 (split from g0-t0)" in problem


def test_a_child_given_to_nobody_after_its_parent_s_release_is_a_gap() -> None:
    lines = [start(T0 + 1, "g0/w0#1", "g0-t0", "g0-t0#1"), stop(T0 + 2, "g0/w0#1", "g0-t0", "g0-t0#1"),
             start(T0 + 2.1, "g0/w1#1", "g0-t0a", "g0-t0b", "g0-t0a#1"), event("end", T0 + 30)]
    (problem,) = judge(lines, SPLIT)  # replica 1 of t0b never ran: its range unowned since the parent's release
    assert problem.startswith("gap g0-t0b#1 unowned 28.00s")
    late = [start(T0 + 1, "g0/w0#1", "g0-t0"), stop(T0 + 2, "g0/w0#1", "g0-t0"),
            start(T0 + 2 + BOUND + 0.1, "g0/w1#1", "g0-t0a", "g0-t0b"), event("end", T0 + 30)]
    assert len(judge(late, SPLIT)) == 2 and judge(late[:2] + [start(T0 + 2 + BOUND - 0.1, "g0/w1#1", "g0-t0a",
                                                                       "g0-t0b"), late[3]], SPLIT) == []
