"""Incremental targets (``assignors.incremental``): the sticky count rule from the previous target.

Property (hypothesis): from a previous sticky target over a plain catalog, any change (members in and
out, tasks added and deleted) gives a target that covers the catalog once, is balanced within one,
and moves no replica that the rule does not demand: a member gives up only what is over its quota
(the ``ceil`` quotas going to the members that keep the most), never gives up and receives in one
change, and the replicas moved are exactly the fewest any within-one target needs. It also moves no
more than the full sticky pass does from the same previous assignment.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.incremental import IncrementalAssignor, TargetChange, rebalance_counts
from groupcoord.assignors.round_robin import RoundRobinAssignor
from groupcoord.assignors.sticky import StickyAssignor

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fewest_moves(kept: dict[str, int], total: int) -> int:
    """The least number of replicas members must give up for counts within one (quotas by count)."""
    base, extra = divmod(total, len(kept))
    counts = sorted(kept.values(), reverse=True)
    return sum(max(0, have - (base + 1 if rank < extra else base)) for rank, have in enumerate(counts))


@st.composite
def changes(draw: st.DrawFn) -> tuple[TargetChange, dict[str, frozenset[TaskReplica]], set[TaskReplica]]:
    """A previous sticky target, then members in and out and tasks added and deleted."""
    before = [f"m{i:02d}" for i in range(draw(st.integers(1, 8)))]
    tasks = [f"t{i:03d}" for i in range(draw(st.integers(0, 60)))]
    full = StickyAssignor().assign(AssignmentContext("g", 1, tuple(MemberInfo(m) for m in before),
                                                     tuple(TaskSpec(t) for t in tasks)))
    previous = {m: frozenset(r) for m, r in full.members.items()}
    left = set(draw(st.lists(st.sampled_from(before), unique=True, max_size=len(before) - 1)))
    joined = [f"n{i}" for i in range(draw(st.integers(0 if left else 1, 4)))]
    deleted = set(draw(st.lists(st.sampled_from(tasks), unique=True))) if tasks else set()
    added = [f"u{i:03d}" for i in range(draw(st.integers(0, 20)))]
    catalog = {TaskReplica(t) for t in tasks if t not in deleted} | {TaskReplica(t) for t in added}
    orphans = frozenset().union(*(previous[m] for m in left))
    members = tuple(MemberInfo(m) for m in sorted(set(before) - left) + joined)
    change = TargetChange(previous={m: previous[m] for m in before if m not in left}, members=members,
                          homeless=orphans | {TaskReplica(t) for t in added},
                          removed=frozenset(TaskReplica(t) for t in deleted), total=len(catalog), plain=True)
    return change, previous, catalog


@SETTINGS
@given(changes())
def test_the_incremental_target_is_what_the_sticky_rule_demands(
        case: tuple[TargetChange, dict[str, frozenset[TaskReplica]], set[TaskReplica]]) -> None:
    change, _, catalog = case
    target = StickyAssignor().assign_incremental(change)
    assert target is not None
    assert set(target) == {m.member_id for m in change.members}
    given_out = [r for tasks in target.values() for r in tasks]
    assert len(given_out) == len(set(given_out)) and set(given_out) == catalog  # the catalog, once
    counts = [len(tasks) for tasks in target.values()]
    assert max(counts) - min(counts) <= 1  # balanced within one
    kept = {m: change.previous.get(m, frozenset()) - change.removed for m in target}
    moved = 0
    for member_id, tasks in target.items():
        lost, gained = kept[member_id] - tasks, tasks - kept[member_id]
        assert not (lost and gained), f"{member_id} gave up and received in one change"
        moved += len(lost)
    assert moved == fewest_moves({m: len(k) for m, k in kept.items()}, len(catalog))  # no move not needed
    context = AssignmentContext("g", 2, tuple(MemberInfo(m, owned=tuple(kept[m]), owned_generation=1)
                                              for m in target), tuple(TaskSpec(r.task_id) for r in catalog))
    full = StickyAssignor().assign(context)
    assert moved <= sum(len(kept[m] - set(full.members[m])) for m in target)


def test_it_declines_what_it_cannot_count() -> None:
    members = (MemberInfo("a"), MemberInfo("b"))
    plain = TargetChange(previous={"a": frozenset({TaskReplica("t1")})}, members=members,
                         homeless=frozenset({TaskReplica("t2")}), removed=frozenset(), total=2, plain=True)
    assert rebalance_counts(plain) == {"a": frozenset({TaskReplica("t1")}), "b": frozenset({TaskReplica("t2")})}
    not_plain = TargetChange(plain.previous, members, plain.homeless, plain.removed, 2, plain=False)
    pooled = TargetChange(plain.previous, (MemberInfo("a"), MemberInfo("b", pool="p")), plain.homeless,
                          plain.removed, 2, plain=True)
    short = TargetChange(plain.previous, members, frozenset(), plain.removed, 2, plain=True)  # t2 unaccounted
    assert rebalance_counts(not_plain) is None and rebalance_counts(pooled) is None
    assert rebalance_counts(short) is None
    assert isinstance(StickyAssignor(), IncrementalAssignor)
    assert not isinstance(RoundRobinAssignor(), IncrementalAssignor)  # no incremental form: its full pass


def ranked_by_rule(change: TargetChange) -> dict[str, frozenset[TaskReplica]] | None:
    """The count rule spelt out member by member (rank every member by what it keeps, most first, then
    by id; give up the highest replicas over quota; the lowest homeless ones go to the emptiest first):
    the answer ``rebalance_counts`` must give, replica for replica."""
    kept = {m.member_id: change.previous.get(m.member_id, frozenset()) - change.removed for m in change.members}
    homeless = set(change.homeless - change.removed)
    if sum(map(len, kept.values())) + len(homeless) != change.total:
        return None
    base, extra = divmod(change.total, len(kept))
    order = sorted(kept, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + 1 if rank < extra else base for rank, m in enumerate(order)}
    target = {}
    for m in order:
        surplus = sorted(kept[m], reverse=True)[:max(0, len(kept[m]) - quota[m])]
        homeless.update(surplus)
        target[m] = kept[m] - set(surplus)
    pool = sorted(homeless)
    for m in reversed(order):
        need = quota[m] - len(target[m])
        target[m], pool = target[m] | frozenset(pool[:max(need, 0)]), pool[max(need, 0):]
    return target if not pool else None


@SETTINGS
@given(changes(), st.randoms(use_true_random=False))
def test_the_answer_is_the_rule_spelt_out_whatever_the_member_order(
        case: tuple[TargetChange, dict[str, frozenset[TaskReplica]], set[TaskReplica]], rnd: object) -> None:
    change, _, _ = case
    shuffled = list(change.members)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    change = TargetChange(previous=change.previous, members=tuple(shuffled), homeless=change.homeless,
                          removed=change.removed, total=change.total, plain=True)
    assert rebalance_counts(change) == ranked_by_rule(change)


def test_a_group_of_many_sizes_is_ranked_by_size_then_id() -> None:
    """More than eight sizes take the pair sort: the same rule."""
    previous = {f"m{i:02d}": frozenset(TaskReplica(f"t{i:02d}-{j}") for j in range(i)) for i in range(12)}
    members = tuple(MemberInfo(m) for m in reversed(list(previous)))
    change = TargetChange(previous=previous, members=members, homeless=frozenset(), removed=frozenset(),
                          total=sum(map(len, previous.values())), plain=True)
    target = rebalance_counts(change)
    assert target == ranked_by_rule(change)
    assert target is not None and max(map(len, target.values())) - min(map(len, target.values())) <= 1


def test_a_previous_target_naming_a_member_gone_counts_only_the_members_here() -> None:
    """``previous`` should name only members still here; one that names another (as many entries as
    the members, so only the names tell) still gives a target of exactly the members."""
    t = [TaskReplica(f"t{i}") for i in range(4)]
    change = TargetChange(previous={"a": frozenset(t[:2]), "gone": frozenset(t[2:])},
                          members=(MemberInfo("a"), MemberInfo("b")), homeless=frozenset(t[2:]), removed=frozenset(),
                          total=4, plain=True)
    target = rebalance_counts(change)
    assert target == {"a": frozenset(t[:2]), "b": frozenset(t[2:])} == ranked_by_rule(change)
