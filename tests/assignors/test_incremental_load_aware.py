"""Incremental targets of ``balanced`` and the ``pulsar-*`` assignors (``assign_incremental``).

Property (hypothesis): from a previous target the assignor's own full pass made, any change (members
in and out with their capacities, tasks added and deleted) gives, through ``assign_incremental``,
exactly what the full pass gives from that previous target (two instances with the same history, one
fed full passes, one incremental ones), covers the catalog once, and keeps the assignor's own rules:
``balanced`` moves only on its verdict (a membership change, over the capacity goal, above
``urgent_ratio``, or a second round in a row above ``trigger_ratio``), then stops only when its busiest
member is within the goal or no allowed move would lower it by ``min_gain``; a ``pulsar-*`` round
without a snapshot moves nothing that had a member (a newcomer waits for the shedder, as a new broker
does) and gives each replica without one to a member that had the fewest. Both decline (``None``: the
full pass) what a count cannot stand for.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from groupcoord.assignors.balanced import BalancedAssignor, BalancedConfig
from groupcoord.assignors.balanced.optimizer import Move
from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.incremental import IncrementalAssignor, TargetChange
from groupcoord.assignors.pulsar.assignors import (
    PulsarAssignor,
    PulsarAvgAssignor,
    PulsarOverloadAssignor,
    PulsarThresholdAssignor,
    PulsarTransferAssignor,
    PulsarUniformAssignor,
)
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats
from groupcoord.coordinator.clock import FakeClock

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
Target = dict[str, frozenset[TaskReplica]]
Either = BalancedAssignor | PulsarAssignor
EPSILON = 1e-9
PULSARS = (PulsarAvgAssignor, PulsarOverloadAssignor, PulsarThresholdAssignor, PulsarTransferAssignor,
           PulsarUniformAssignor)


class Case:
    """Two rounds: the first (a full pass) makes the previous target, the second is the change."""

    def __init__(self, draw: st.DrawFn, weight: float, tasks_change: bool = True) -> None:
        before = [f"m{i:02d}" for i in range(draw(st.integers(1, 7)))]
        capacity = {m: draw(st.sampled_from((1.0, 1.0, 2.0, 0.5))) for m in before}
        tasks = [f"t{i:03d}" for i in range(draw(st.integers(0, 50)))]
        self.weight = weight
        self.first = AssignmentContext("g", 1, tuple(MemberInfo(m, capacity=capacity[m]) for m in before),
                                       tuple(TaskSpec(t, weight=weight) for t in tasks))
        left = set(draw(st.lists(st.sampled_from(before), unique=True, max_size=len(before) - 1)))
        joined = [f"n{i}" for i in range(draw(st.integers(0, 3)))]
        capacity |= {m: draw(st.sampled_from((1.0, 2.0))) for m in joined}
        pooled = draw(st.booleans()) and len(before) - len(left) > 1  # a member moved to another pool
        deleted = set(draw(st.lists(st.sampled_from(tasks), unique=True))) if tasks and tasks_change else set()
        added = [f"u{i:03d}" for i in range(draw(st.integers(0, 15 if tasks_change else 0)))]
        self.snapshot: LoadSnapshot | None = None
        self.left, self.joined, self.deleted = left, joined, deleted
        self.members = sorted(set(before) - left) + joined
        self.pool = {m: "p" if pooled and m == self.members[0] else "" for m in self.members}
        self.capacity = capacity
        self.catalog = sorted({t for t in tasks if t not in deleted} | set(added))
        self.added = added

    def change(self, previous: Target) -> TargetChange:
        orphans = frozenset().union(*(previous[m] for m in self.left))
        return TargetChange(
            previous={m: previous[m] for m in self.members if m in previous},
            members=tuple(MemberInfo(m, pool=self.pool[m], capacity=self.capacity[m]) for m in self.members),
            homeless=orphans | {TaskReplica(t) for t in self.added},
            removed=frozenset(TaskReplica(t) for t in self.deleted), total=len(self.catalog), plain=True,
            group_id="g", weight=self.weight,
            snapshot_key=None if self.snapshot is None else (self.snapshot.snapshot_id, self.snapshot.created_ms))

    def second(self, previous: Target) -> AssignmentContext:
        """The full pass's input for the change: each member owns its previous target."""
        members = tuple(MemberInfo(m, pool=self.pool[m], capacity=self.capacity[m],
                                   owned=tuple(sorted(previous.get(m, ()))), owned_generation=1)
                        for m in self.members)
        return AssignmentContext("g", 2, members, tuple(TaskSpec(t, weight=self.weight) for t in self.catalog),
                                 load_snapshot=self.snapshot)

    def with_snapshot(self, seed: int) -> Case:
        """The same case under one load snapshot of the first round's tasks and members (seeded rates)."""
        rng = random.Random(seed)
        ids = [m.member_id for m in self.first.members]
        tasks = {t.task_id: TaskLoadStats(t.task_id, ids[i % len(ids)], short_samples=10, long_samples=100,
                                          short_msg_rate_in=rng.uniform(1, 100))
                 for i, t in enumerate(self.first.tasks) if rng.random() < 0.9}  # a few never reported
        workers = {m: WorkerLoadStats(m, cpu_usage=rng.uniform(10, 90), cpu_limit=rng.choice((100.0, 200.0)))
                   for m in ids if rng.random() < 0.8}
        self.snapshot = LoadSnapshot("g", f"s{seed}", 1, MappingProxyType(tasks), MappingProxyType(workers))
        self.first = replace(self.first, load_snapshot=self.snapshot)
        return self


@st.composite
def cases(draw: st.DrawFn) -> Case:
    return Case(draw, draw(st.sampled_from((1.0, 0.1, 3.0))))


@st.composite
def snapshot_cases(draw: st.DrawFn) -> Case:
    """Members in and out under the snapshot the first round read (no task added or deleted)."""
    return Case(draw, 1.0, tasks_change=False).with_snapshot(draw(st.integers(0, 2**31)))


def as_target(answer: Assignment) -> Target:
    assert not answer.unassigned
    return {m: frozenset(r) for m, r in answer.members.items()}


def twins(make: Callable[[], Either], case: Case) -> tuple[Target, Target, Target, Either]:
    """The previous target, then the full pass's and the incremental answer from it (same histories)."""
    full, incremental = make(), make()
    previous = as_target(full.assign(case.first))
    assert as_target(incremental.assign(case.first)) == previous
    answer = incremental.assign_incremental(case.change(previous))
    assert answer is not None
    return previous, as_target(full.assign(case.second(previous))), dict(answer), incremental


def covers_once(case: Case, target: Target) -> None:
    assert set(target) == set(case.members)
    given_out = [r for tasks in target.values() for r in tasks]
    assert len(given_out) == len(set(given_out)) and set(given_out) == {TaskReplica(t) for t in case.catalog}
    assert not any(target[m] for m in case.members if case.pool[m])  # the catalog is all in the default pool


def balanced() -> BalancedAssignor:
    return BalancedAssignor(clock=FakeClock().now)


def utilization(case: Case, target: Target) -> dict[str, float]:
    """The default pool's utilizations as ``balanced``'s plan sums them (the weight added once per
    replica, over the capacity), so that a check against its lines rounds as it does."""
    util: dict[str, float] = {}
    for member in (m for m in case.members if not case.pool[m]):
        load = 0.0
        for _ in target[member]:
            load += case.weight
        util[member] = load / max(case.capacity[member], 1e-9)
    return util


def acts_and_hits(case: Case, placed: Target) -> tuple[bool, bool]:
    """``balanced``'s verdict on the round's plan before its moves (no snapshot: no background, so its
    lines are the ratios x the mean): does it rebalance now (a membership change, over the capacity
    goal, or above ``urgent_ratio``), and does it count a hit (above ``trigger_ratio``)?"""
    conf, util = BalancedConfig(), utilization(case, placed)
    mean = sum(util.values()) / len(util)
    busiest = max((u for m, u in util.items() if placed[m]), default=0.0)
    goal = conf.target_ratio * mean  # ``Bands.of``'s lines, in its order of operations
    trigger = goal + (conf.trigger_ratio - conf.target_ratio) * mean
    urgent = goal + (conf.urgent_ratio - conf.target_ratio) * mean
    over = mean < conf.capacity_threshold and busiest > conf.capacity_threshold
    return bool(case.left or case.joined) or over or busiest > urgent, busiest > trigger


def before_moves(target: Target, moves: list[Move]) -> Target:
    """The round's plan before its moves: each one undone, last first."""
    placed = {m: set(tasks) for m, tasks in target.items()}
    for move in reversed(moves):
        placed[move.destination].remove(move.replica)
        placed[move.source].add(move.replica)
    return {m: frozenset(tasks) for m, tasks in placed.items()}


def keeps_its_goal(case: Case, target: Target, moves: list[Move]) -> None:
    """After a round that rebalanced: the busiest member is within ``target_ratio`` of the mean, or no
    move off it to any member lowers it by ``min_gain`` under the capacity goal, but one the no-return
    rule forbids (``moves``: those of every round so far, all within ``no_return_s``)."""
    conf, w = BalancedConfig(), case.weight
    util = {m: len(target[m]) * w / case.capacity[m] for m in case.members if not case.pool[m]}
    mean = sum(util.values()) / len(util)
    busiest = max(util, key=lambda m: (util[m], m))
    if util[busiest] <= conf.target_ratio * mean:
        return
    # the capacity goal holds while the mean is below its line: at the line, the optimizer's running sum
    # (a plan's loads after moves are sums less differences) may round either way, so either may hold
    ceiling = conf.capacity_threshold if mean < conf.capacity_threshold + EPSILON else float("inf")
    moved_off = {(move.replica.task_id, move.source) for move in moves}
    for receiver, now in util.items():
        after = max(util[busiest] - w / case.capacity[busiest], now + w / case.capacity[receiver])
        if receiver == busiest or now + w / case.capacity[receiver] > ceiling - EPSILON:
            continue  # over the capacity goal (at its edge, sums in another order may round either way)
        blocked = all((r.task_id, receiver) in moved_off for r in target[busiest])
        assert util[busiest] - after < conf.min_gain + EPSILON or blocked, f"{busiest} could give {receiver} a task"


def scripted(*values: object) -> st.DrawFn:
    """A draw that answers the given values in order: a ``Case`` pinned by what hypothesis drew."""
    answers = iter(values)
    return lambda strategy, label=None: next(answers)  # type: ignore[return-value]


# Found by hypothesis: two members, t001 (m01's) deleted leaves 14 against 12, 1.077x the mean: above
# trigger_ratio (a first hit), below urgent_ratio, and no member joined or left, so the round moves nothing.
# members, their capacities, tasks, left, joined, pooled, deleted, added
DELETED_ONE_HIT = Case(scripted(2, 1.0, 1.0, 27, [], 0, False, ["t001"], 0), 1.0)
# Found by hypothesis: m00 at 0.9 and n0 (capacity 2) at 0.8, so the mean is 0.85, the capacity goal's line,
# to the last bit: whether the goal holds (and n0 may not go over 0.85) depends on the order of the sums.
MEAN_AT_THE_CAPACITY_GOAL = Case(scripted(1, 1.0, 27, [], 1, 2.0, False, ["t000", "t001"], 0), 0.1)
# Found by a wider search (ten members): n0 at 5 could give n2 (capacity 2, at 4) a task, but n2 was the ninth of
# nine receivers at 4 by id, and the optimizer looked at the eight least utilized only (now also at the least
# utilized of each capacity).
TIE_OF_SMALL_MEMBERS = Case(scripted(7, 0.5, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 47, [], 3, 1.0, 1.0, 2.0, False,
                                     ["t006", "t011", "t013", "t016", "t018", "t019", "t020", "t026", "t030",
                                      "t031", "t040", "t042"], 6), 1.0)


@SETTINGS
@example(case=DELETED_ONE_HIT)
@example(case=MEAN_AT_THE_CAPACITY_GOAL)
@example(case=TIE_OF_SMALL_MEMBERS)
@given(cases())
def test_balanced_incremental_is_its_full_pass_and_keeps_its_goal(case: Case) -> None:
    """Balanced rebalances when its verdict says so (a membership change, over the capacity goal, above
    ``urgent_ratio``, or ``hit_count`` rounds in a row above ``trigger_ratio``) and then reaches its goal;
    otherwise it moves nothing, and a hit this round makes the next round without a change rebalance."""
    previous, full, target, assignor = twins(balanced, case)
    assert target == full
    covers_once(case, target)
    if not case.catalog:
        return
    assert isinstance(assignor, BalancedAssignor)
    history = balanced()  # the full pass's twin again, for the first round's moves and a third round
    history.assign(case.first)
    first_moves = list(history.last_moves)
    moves = list(assignor.last_moves)
    acts, hit = acts_and_hits(case, before_moves(target, moves))
    if acts:
        keeps_its_goal(case, target, first_moves + moves)
        return
    assert not moves, f"moved {moves} without a membership change, under urgent_ratio and the capacity goal"
    assert BalancedConfig().hit_count == 2  # the first round (a membership change) reset the count
    if not hit:
        return
    # the second hit in a row: the next round, with nothing changed, rebalances (full pass and incremental alike)
    members = case.change(previous).members
    again = TargetChange(previous=target, members=members, homeless=frozenset(), removed=frozenset(),
                         total=len(case.catalog), plain=True, group_id="g", weight=case.weight)
    third = assignor.assign_incremental(again)
    assert third is not None
    history.assign(case.second(previous))
    owned = tuple(replace(m, owned=tuple(sorted(target[m.member_id])), owned_generation=2) for m in members)
    assert third == as_target(history.assign(replace(case.second(previous), generation=3, members=owned)))
    assert assignor.last_moves == history.last_moves
    keeps_its_goal(case, third, first_moves + assignor.last_moves)


@SETTINGS
@given(snapshot_cases())
def test_balanced_under_the_snapshot_its_full_pass_read_goes_on_as_its_full_pass(case: Case) -> None:
    previous, full, target, assignor = twins(balanced, case)
    assert target == full
    covers_once(case, target)
    # one more member, same snapshot: the members' sums kept from the round before are used as they are
    members = tuple(MemberInfo(m, pool=case.pool[m], capacity=case.capacity[m], owned=tuple(sorted(target[m])),
                               owned_generation=2) for m in case.members) + (MemberInfo("z"),)
    again = TargetChange(previous=target, members=members, homeless=frozenset(), removed=frozenset(),
                         total=len(case.catalog), plain=True, group_id="g", snapshot_key=case.change(previous).snapshot_key)
    answer = assignor.assign_incremental(again)
    twin = balanced()  # the full pass's twin, with the same history
    twin.assign(case.first)
    twin.assign(case.second(previous))
    assert answer == as_target(twin.assign(AssignmentContext("g", 3, members, case.second(previous).tasks,
                                                             load_snapshot=case.snapshot)))


@pytest.mark.parametrize("make", PULSARS, ids=lambda make: make.name)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_pulsar_incremental_is_its_sticky_round_robin(make: type[PulsarAssignor], case: Case) -> None:
    previous, full, target, _ = twins(lambda: make(clock=FakeClock().now), case)
    assert target == full
    covers_once(case, target)
    removed = {TaskReplica(t) for t in case.deleted}
    kept = {m: previous.get(m, frozenset()) - removed if not case.pool[m] else frozenset() for m in case.members}
    for member_id, tasks in target.items():
        assert kept[member_id] <= tasks, f"{member_id} lost a task it could keep"
    fewest = min(len(target[m]) for m in case.members if not case.pool[m])
    for member_id in case.members:  # each receipt went to a member with the fewest at that moment
        if target[member_id] - kept[member_id]:
            assert len(target[member_id]) <= fewest + 1, f"{member_id} received over a member with fewer"


def test_they_decline_what_a_count_cannot_stand_for() -> None:
    t1, t2 = TaskReplica("t1"), TaskReplica("t2")
    members = (MemberInfo("a"), MemberInfo("b"))
    plain = TargetChange(previous={"a": frozenset({t1})}, members=members, homeless=frozenset({t2}),
                         removed=frozenset(), total=2, plain=True, group_id="g")
    for assignor in (balanced(), PulsarUniformAssignor(clock=FakeClock().now)):
        assert isinstance(assignor, IncrementalAssignor)
        assert assignor.assign_incremental(plain) == {"a": frozenset({t1}), "b": frozenset({t2})}
        for declined in (
            TargetChange(plain.previous, members, plain.homeless, plain.removed, 2, plain=False),  # weights differ
            TargetChange(plain.previous, members, frozenset(), plain.removed, 2, plain=True),  # t2 unaccounted
            TargetChange(plain.previous, (MemberInfo("a", pool="p"),), plain.homeless, plain.removed, 2, True),
        ):
            assert assignor.assign_incremental(declined) is None, declined
    loaded = TargetChange(plain.previous, members, plain.homeless, plain.removed, 2, plain=True, snapshot_key=("s", 1))
    assert balanced().assign_incremental(loaded) is None  # a snapshot it has not read: the estimate reads it all
    assert PulsarUniformAssignor(clock=FakeClock().now).assign_incremental(loaded) is None  # the shedder reads them


def pulsar_twins(make: type[PulsarAssignor], case: Case) -> tuple[PulsarAssignor, PulsarAssignor, Target]:
    """Two instances with the same history (the first round, a full pass on the snapshot) and its target."""
    full, incremental = make(clock=FakeClock().now), make(clock=FakeClock().now)
    previous = as_target(full.assign(replace(case.first, rng=random.Random(0))))  # each its own draws
    assert as_target(incremental.assign(replace(case.first, rng=random.Random(0)))) == previous
    return full, incremental, previous


def incremental_or_full(assignor: PulsarAssignor, change: TargetChange, context: AssignmentContext) -> tuple[
        Target, bool]:
    """What the coordinator installs: the incremental answer, else the full pass; and whether it was incremental."""
    answer = assignor.assign_incremental(change)
    return (dict(answer), True) if answer is not None else (as_target(assignor.assign(context)), False)


@pytest.mark.parametrize("make", PULSARS, ids=lambda make: make.name)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=snapshot_cases())
def test_pulsar_under_the_snapshot_its_full_pass_read_joins_are_its_full_pass(
        make: type[PulsarAssignor], case: Case) -> None:
    full, incremental, previous = pulsar_twins(make, case)
    target, quick = incremental_or_full(incremental, case.change(previous), case.second(previous))
    assert target == as_target(full.assign(case.second(previous)))
    covers_once(case, target)
    lost = any(previous.get(m) for m in case.left) or any(previous.get(m) for m in case.members if case.pool[m])
    assert quick == (not lost and len(case.first.members) > 1 and bool(case.catalog))  # declined only when it must
    if quick:
        assert all(target[m] == previous.get(m, frozenset()) for m in case.members if not case.pool[m])
    # a third round, one more member under the same snapshot: the twins' states went on alike
    members = tuple(MemberInfo(m, pool=case.pool[m], capacity=case.capacity[m], owned=tuple(sorted(target[m])),
                               owned_generation=2) for m in case.members) + (MemberInfo("z"),)
    again = TargetChange(previous=target, members=members, homeless=frozenset(), removed=frozenset(),
                         total=len(case.catalog), plain=True, group_id="g",
                         snapshot_key=case.change(previous).snapshot_key)
    context = AssignmentContext("g", 3, members, case.second(previous).tasks, load_snapshot=case.snapshot)
    assert incremental_or_full(incremental, again, context)[0] == as_target(
        full.assign(replace(context, rng=random.Random(0))))


def test_pulsar_under_a_snapshot_declines_what_its_full_pass_must_judge() -> None:
    """A newer snapshot, a task added, and a shedding plan the re-check computed and left waiting."""
    owner = {f"t{i}": "a" for i in range(8)} | {"u": "b", "v": "c"}
    members = ("a", "b", "c")
    tasks = tuple(TaskSpec(t) for t in sorted(owner))
    cpu = {"a": 95.0, "b": 10.0, "c": 10.0}

    def snapshot(sid: str, created: int) -> LoadSnapshot:
        rows = {t: TaskLoadStats(t, m, short_samples=10, long_samples=100, long_msg_rate_in=1000.0,
                                 short_msg_rate_in=1000.0) for t, m in owner.items()}
        workers = {m: WorkerLoadStats(m, cpu_usage=c, cpu_limit=100.0) for m, c in cpu.items()}
        return LoadSnapshot("g", sid, created, MappingProxyType(rows), MappingProxyType(workers))

    def context(snap: LoadSnapshot, who: tuple[str, ...] = members) -> AssignmentContext:
        return AssignmentContext("g", 1, tuple(MemberInfo(m, owned=tuple(TaskReplica(t) for t, o in owner.items()
                                                                          if o == m)) for m in who), tasks,
                                 load_snapshot=snap)

    assignor = PulsarOverloadAssignor(clock=FakeClock().now)
    s1 = snapshot("s1", 1)
    previous = as_target(assignor.assign(context(s1)))
    joined = (*[MemberInfo(m) for m in members], MemberInfo("n"))

    def change(key: tuple[str, int], homeless: frozenset[TaskReplica] = frozenset(), total: int = len(tasks)) -> (
            TargetChange):
        return TargetChange(previous, joined, homeless, frozenset(), total, plain=True, group_id="g", snapshot_key=key)

    assert assignor.assign_incremental(change(("s1", 1))) == {**previous, "n": frozenset()}
    assert assignor.assign_incremental(change(("s2", 2))) is None  # a snapshot the shedder has not judged
    assert assignor.assign_incremental(change(("s1", 1), frozenset({TaskReplica("w")}), len(tasks) + 1)) is None
    s2 = snapshot("s2", 2)
    assert assignor.needs_rebalance(context(s2))  # the re-check's plan for s2 waits for the next full pass
    assignor.assign(context(s2, ("a",)))  # ... which, with one member, cannot shed: the plan still waits
    assert assignor.assign_incremental(change(("s2", 2))) is None


def test_pulsar_declines_a_join_the_splitter_or_the_shedder_has_not_judged_with_two_members() -> None:
    """One member read the snapshot: with shedding off, the splitter (which needs two members) has not had
    its say, so a join is a full pass, which splits; a plan a re-check left waiting is a full pass too."""
    attrs = MappingProxyType({"hash_lower": "0x00000000", "hash_upper": "0x100000000"})
    tasks = (TaskSpec("orders", attributes=attrs), TaskSpec("other"))
    rows = {"orders": TaskLoadStats("orders", "a", short_samples=10, long_samples=100, long_msg_rate_in=20000.0,
                                    long_msg_rate_out=20000.0, short_msg_rate_in=20000.0, topics=10),
            "other": TaskLoadStats("other", "a", short_samples=10, long_samples=100, long_msg_rate_in=10.0)}
    snap = LoadSnapshot("g", "s1", 1, MappingProxyType(rows), MappingProxyType({}))
    owned = tuple(TaskReplica(t.task_id) for t in tasks)
    assignor = PulsarUniformAssignor(replace(PulsarUniformAssignor().config, load_balancer_shedding_enabled=False),
                                     clock=FakeClock().now)
    previous = as_target(assignor.assign(AssignmentContext("g", 1, (MemberInfo("a", owned=owned),), tasks,
                                                           load_snapshot=snap)))
    both = (MemberInfo("a", owned=owned), MemberInfo("b"))
    join = TargetChange(previous, both, frozenset(), frozenset(), 2, plain=True, group_id="g", snapshot_key=("s1", 1))
    assert assignor.assign_incremental(join) is None
    assert [s.parent_task_id for s in assignor.assign(AssignmentContext("g", 2, both, tasks, load_snapshot=snap)
                                                      ).splits] == ["orders"]

    rows = {**rows, "orders": replace(rows["orders"], topics=1)}  # not to be split
    snap = LoadSnapshot("g", "s1", 1, MappingProxyType(rows), MappingProxyType({}))
    shedding = PulsarOverloadAssignor(clock=FakeClock().now)  # read s1 with two members: settled on it ...
    target = as_target(shedding.assign(AssignmentContext("g", 1, both, tasks, load_snapshot=snap)))
    join = TargetChange(target, (*both, MemberInfo("n")), frozenset(), frozenset(), 2, plain=True, group_id="g",
                        snapshot_key=("s1", 1))
    assert shedding.assign_incremental(join) == {**target, "n": frozenset()}
    hot = LoadSnapshot("g", "s2", 2, MappingProxyType(rows), MappingProxyType({"a": WorkerLoadStats("a", cpu_usage=99.0,
                                                                                                   cpu_limit=100.0)}))
    assert shedding.needs_rebalance(AssignmentContext("g", 1, both, tasks, load_snapshot=hot))  # ... s2's plan waits
    assert shedding.assign_incremental(join) is None
