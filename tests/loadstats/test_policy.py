"""The report-update policy on a fake clock."""

from __future__ import annotations

import math

import pytest

from groupcoord.loadstats.report_policy import ReportPolicy, percent_change
from groupcoord.loadstats.samples import LoadReport, ResourceUsage, TaskLoad


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


MEM = ResourceUsage(100.0, 0.0)


def report(
    cpu: float = 100.0,
    rate: float = 1000.0,
    thr: float = 1e6,
    tasks: tuple[str, ...] = ("a", "b"),
    mem: ResourceUsage = MEM,
) -> LoadReport:
    return LoadReport(
        ts_ms=0,
        cpu=ResourceUsage(cpu, 400.0),
        memory=mem,
        tasks=tuple(TaskLoad(t, rate / len(tasks), 0.0, thr / len(tasks), 0.0) for t in tasks),
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_first_report_is_sent(clock: FakeClock) -> None:
    p = ReportPolicy(clock=clock)
    assert p.should_send(report()) and p.reason(report()) == "first"


def test_small_changes_wait_for_max_interval(clock: FakeClock) -> None:
    p = ReportPolicy(clock=clock)
    p.sent(report())
    assert not p.should_send(report(rate=1090.0, thr=1.05e6, cpu=130.0))  # 9%, 5%, 7.5 points
    clock.advance(900.0)
    assert not p.should_send(report())  # Pulsar: strictly more than the interval
    clock.advance(0.001)
    assert p.reason(report()) == "interval"
    p.sent(report())
    assert not p.should_send(report())


@pytest.mark.parametrize(
    "changed",
    [
        report(rate=1101.0),  # msg rate +10.1 %
        report(thr=0.89e6),  # throughput -11 %
        report(cpu=141.0),  # cpu 25 % -> 35.25 % of its limit: 10.25 points
        report(mem=ResourceUsage(111.0, 0.0)),  # unknown limit: relative change of usage 11 %
    ],
)
def test_change_over_threshold_sends(clock: FakeClock, changed: LoadReport) -> None:
    p = ReportPolicy(clock=clock)
    p.sent(report())
    assert p.reason(changed) == "change"


def test_tasks_added_or_removed_send(clock: FakeClock) -> None:
    p = ReportPolicy(clock=clock)
    p.sent(report(tasks=("a", "b")))
    assert p.reason(report(tasks=("a",))) == "tasks"
    assert p.reason(report(tasks=("a", "b", "c"))) == "tasks"
    assert p.reason(report(tasks=("b", "c"))) == "tasks"


def test_zero_baselines(clock: FakeClock) -> None:
    p = ReportPolicy(clock=clock)
    p.sent(report(rate=0.0, thr=0.0))
    assert not p.should_send(report(rate=0.5, thr=500.0))  # noise below the floors
    assert p.should_send(report(rate=5.0, thr=0.0))  # real traffic off an idle baseline
    assert percent_change(0.0, 0.0) == 0.0
    assert percent_change(0.0, 1.0) == math.inf
    assert percent_change(10.0, 12.0) == pytest.approx(20.0)


def test_threshold_zero_sends_any_change(clock: FakeClock) -> None:
    p = ReportPolicy(threshold_percentage=0, clock=clock)
    p.sent(report())
    assert not p.should_send(report())
    assert p.should_send(report(rate=1000.5))


def test_config_checked() -> None:
    with pytest.raises(ValueError):
        ReportPolicy(threshold_percentage=-1)
    with pytest.raises(ValueError):
        ReportPolicy(max_interval_s=0)
