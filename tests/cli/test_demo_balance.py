"""Act two's figures and self-check, without Spark: the scenario, before/after, what moved, the PNG.

The snapshots here are what the statistics job makes of the scenario's reports when every rate
is constant (each average is the rate itself), so the real assignors see the numbers the demo's
groups see.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from groupcoord.assignors.base import AssignmentContext, MemberInfo, RebalanceCheck, TaskReplica, TaskSpec
from groupcoord.assignors.registry import get_assignor
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats
from groupcoord.cli import demo_plot
from groupcoord.cli.demo_balance import Outcome, failures, format_outcome, max_mean, member_loads
from groupcoord.cli.demo_load import ROUNDS, STRATEGIES
from groupcoord.cli.demo_scenario import CPU_LIMIT, LoadModel

TASKS = tuple(f"bundle-{i:02d}" for i in range(12))
NAMES = ("g-w0", "g-w1", "g-w2")
IDS = {name: f"{name}-member" for name in NAMES}
Owners = dict[str, tuple[str, ...]]


def round_robin() -> Owners:
    return {name: TASKS[i::3] for i, name in enumerate(NAMES)}


def armed() -> LoadModel:
    model = LoadModel(TASKS)
    model.arm(round_robin())
    return model


def snapshot(model: LoadModel, owners: Owners, number: int = 0) -> LoadSnapshot:
    """What the job would publish after the members reported ``owners`` for a while."""
    tasks, workers = {}, {}
    for name, owned in owners.items():
        report = model.report(name, owned)
        assert report is not None
        for t in report.tasks:
            tasks[t.task_id] = TaskLoadStats(
                t.task_id, IDS[name], 10, t.msg_rate_in, t.msg_rate_out, t.msg_throughput_in, t.msg_throughput_out,
                100, t.msg_rate_in, t.msg_rate_out, t.msg_throughput_in, t.msg_throughput_out, 1, 1, 1)
        workers[IDS[name]] = WorkerLoadStats(
            IDS[name], report.cpu.usage, report.cpu.limit, *report.memory, num_tasks=len(owned),
            long_msg_rate_in=sum(t.msg_rate_in for t in report.tasks),
            long_msg_rate_out=sum(t.msg_rate_out for t in report.tasks))
    return LoadSnapshot("g", f"snap-{number}", 1_000 + number, tasks, workers)


def outcome(model: LoadModel, before: Owners, after: Owners, *, expect_move: bool = True) -> Outcome:
    imbalance = model.imbalance
    assert imbalance is not None
    return Outcome("pulsar-x", imbalance.hot_member, imbalance.foreign_member, before, after,
                   member_loads(snapshot(model, before), before, IDS),
                   member_loads(snapshot(model, after, 1), after, IDS), foreign_cpu=imbalance.foreign_cpu,
                   expect_move=expect_move)


def test_the_scenario_is_seeded_and_a_tasks_load_follows_it() -> None:
    model, again = armed(), armed()
    assert model.rates == again.rates
    imbalance = model.imbalance
    assert imbalance is not None and imbalance.hot_member == "g-w0"
    assert imbalance.hot_tasks == ("bundle-00", "bundle-03")
    assert imbalance.foreign_member == "g-w2"  # the member with the fewest msg/s: msg-rate strategies pick it
    hot_task = model.rates["bundle-00"] * 0.01
    assert model.cpu("g-w1", ["bundle-00"]) == pytest.approx(hot_task)
    assert model.cpu("g-w2", ["bundle-00"]) == pytest.approx(hot_task + imbalance.foreign_cpu)
    assert LoadModel(TASKS).report("g-w0", TASKS[:2]) is None  # nothing to report before the imbalance is armed


def test_before_and_after_figures_sum_the_snapshots_per_task_rates() -> None:
    model = armed()
    before = round_robin()
    after = {**before, "g-w0": ("bundle-03", "bundle-06", "bundle-09"), "g-w1": (*before["g-w1"], "bundle-00")}
    result = outcome(model, before, after)
    assert result.moves() == [("bundle-00", "g-w0", "g-w1")]
    rate = model.rates["bundle-00"]
    assert result.before["g-w0"].msg - result.after["g-w0"].msg == pytest.approx(2 * rate)
    assert result.after["g-w1"].msg - result.before["g-w1"].msg == pytest.approx(2 * rate)
    assert result.before["g-w0"].cpu - result.after["g-w0"].cpu == pytest.approx(100 * rate * 0.01 / CPU_LIMIT)
    cpu_before, cpu_after = result.balance("cpu")
    assert cpu_before == pytest.approx(max_mean([v.cpu for v in result.before.values()])) and cpu_after < cpu_before
    assert failures(result) == []
    assert all(len(line) <= 80 for line in format_outcome(result))


def test_the_self_check_fails_when_nothing_moved() -> None:
    model = armed()
    unchanged = outcome(model, round_robin(), round_robin())
    found = failures(unchanged)
    assert any("moved no task" in f for f in found)
    assert any("CPU did not go down" in f for f in found)
    assert failures(outcome(model, round_robin(), round_robin(), expect_move=False)) == []  # by design: fine


def test_the_self_check_fails_when_the_hot_member_is_no_better_off() -> None:
    model = armed()
    before = round_robin()
    swapped = {**before, "g-w1": before["g-w2"], "g-w2": before["g-w1"]}  # moves, but not off the hot member
    assert any("hot member's CPU" in f for f in failures(outcome(model, before, swapped)))


def test_the_self_check_fails_when_the_workers_reports_disagree() -> None:
    model = armed()
    before = round_robin()
    result = outcome(model, before, before)
    claimed = {**before, "g-w0": before["g-w1"], "g-w1": before["g-w0"]}  # tasks said to have moved, never reported
    result.after = member_loads(snapshot(model, before, 1), claimed, IDS)
    assert any("do not confirm" in f for f in failures(result))


def test_each_strategy_does_in_the_demos_rounds_what_act_two_says_it_does() -> None:
    """The real assignors on the scenario's snapshots, ROUNDS rounds, as each group's leader runs them."""
    for strategy in STRATEGIES:
        assignor = get_assignor(strategy.assignor)
        model = armed()
        owners = round_robin()
        for number in range(ROUNDS):
            members = tuple(MemberInfo(IDS[n], client_id=n, owned=tuple(map(TaskReplica, ts)), owned_generation=number)
                            for n, ts in owners.items())
            context = AssignmentContext(f"unit-{strategy.assignor}", number + 1, members, tuple(map(TaskSpec, TASKS)),
                                        snapshot(model, owners, number), random.Random(number))
            assert isinstance(assignor, RebalanceCheck)
            if assignor.needs_rebalance(context):
                by_id = {v: k for k, v in IDS.items()}
                owners = {by_id[m]: tuple(sorted(r.task_id for r in rs))
                          for m, rs in assignor.assign(context).members.items()}
        result = outcome(model, round_robin(), owners, expect_move=strategy.expect_move)
        assert failures(result) == [], strategy.assignor
        assert bool(result.moves()) == strategy.expect_move, strategy.assignor


def test_the_picture_is_written_or_skipped_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = armed()
    before = round_robin()
    after = {**before, "g-w0": before["g-w0"][1:], "g-w1": (*before["g-w1"], before["g-w0"][0])}
    outcomes = [outcome(model, before, after), outcome(model, before, before, expect_move=False)]
    pytest.importorskip("matplotlib")
    written = demo_plot.plot_outcomes(outcomes, tmp_path / "load.png")
    assert written == tmp_path / "load.png" and written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setattr(demo_plot, "pyplot", lambda: None)
    assert demo_plot.plot_outcomes(outcomes, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
