"""The steps of one ``pulsar-*`` round, and the state the assignor keeps between rounds.

``assignors`` runs them in order — ``sticky_owners``, ``split_tasks``, ``place``, ``shed`` (or
``round_robin`` without a snapshot) — see its module docstring for the round. Each step is a
plain function: it reads the settings from ``conf`` and updates what it is handed — ``owners``
(replica -> member), the ``Assignment``, the ``RoundStats``, the pool's ``LoadData``
(preallocations) and strategies. What persists across rounds (``GroupState``, ``PoolState``) is
owned by the assignor and passed in. The steps log under the assignors' logger name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from groupcoord.assignors.base import (
    Assignment,
    AssignmentContext,
    MemberInfo,
    TaskReplica,
    TaskSpec,
    TaskSplit,
    replica_of,
)
from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.convert import load_data_from_context
from groupcoord.assignors.pulsar.data import BundleData, LoadData
from groupcoord.assignors.pulsar.placement import ModularLoadManagerStrategy, filter_candidates, remove_most_servicing
from groupcoord.assignors.pulsar.shedding_base import LoadSheddingStrategy
from groupcoord.assignors.pulsar.split import child_share, estimate_children, find_bundles_to_split, split_task

__all__ = [
    "Clock",
    "GroupState",
    "PoolState",
    "RoundStats",
    "NAMESPACE_ATTRIBUTE",
    "merged",
    "namespace_counts",
    "no_member_reason",
    "place",
    "pool_load_data",
    "round_robin",
    "shed",
    "split_tasks",
    "sticky_owners",
]

# The assignors' logger: a round logs under one name, whichever module the step lives in.
log = logging.getLogger("groupcoord.assignors.pulsar.assignors")

Clock = Callable[[], float]

NAMESPACE_ATTRIBUTE = "namespace"
"""The task attribute naming its namespace (for ``load_balancer_distribute_bundles_evenly_enabled``)."""


def namespace_counts(tasks: Iterable[TaskSpec], owners: dict[TaskReplica, str]) -> dict[str, dict[str, int]]:
    """namespace -> member -> replicas of that namespace's tasks it owns (Pulsar's
    ``brokerToNamespaceToBundleRange``, turned around); tasks without a namespace are left out."""
    counts: dict[str, dict[str, int]] = {}
    for task in tasks:
        namespace = task.attributes.get(NAMESPACE_ATTRIBUTE)
        if not namespace:
            continue
        per_member = counts.setdefault(namespace, {})
        for replica in task.replica_ids():
            member = owners.get(replica)
            if member is not None:
                per_member[member] = per_member.get(member, 0) + 1
    return counts


def _spread(
    task: TaskSpec, candidates: list[str], counts: dict[str, dict[str, int]], conf: LoadBalancerConfig
) -> list[str]:
    """Pulsar's order in ``selectBroker``: the max-topics filter, then (if on) namespace spreading."""
    namespace = task.attributes.get(NAMESPACE_ATTRIBUTE)
    if not conf.load_balancer_distribute_bundles_evenly_enabled or not namespace:
        return candidates
    return remove_most_servicing(candidates, counts.get(namespace, {}))


def _count(task: TaskSpec, member: str, counts: dict[str, dict[str, int]]) -> None:
    namespace = task.attributes.get(NAMESPACE_ATTRIBUTE)
    if namespace:
        per_member = counts.setdefault(namespace, {})
        per_member[member] = per_member.get(member, 0) + 1


@dataclass
class PoolState:
    shedder: LoadSheddingStrategy
    placement: ModularLoadManagerStrategy
    plan_key: object = None
    plan: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class GroupState:
    recently_unloaded: dict[str, float] = field(default_factory=dict)
    pools: dict[str, PoolState] = field(default_factory=dict)
    # the last full pass read a snapshot and left nothing to do on it (``pulsar.incremental.settled_round``):
    # (its round id, its (snapshot id, created ms), the catalog's size); None otherwise
    settled: tuple[object, tuple[str, int], int] | None = None


@dataclass
class RoundStats:
    """What the last ``assign`` did (for logs, the simulator and tests)."""

    placed: int = 0
    unloaded: int = 0
    unload_skipped: int = 0
    split: int = 0
    moves: list[tuple[str, str, str]] = field(default_factory=list)
    """(task, from member, to member) of every shedding move."""


def sticky_owners(context: AssignmentContext, tasks: tuple[TaskSpec, ...]) -> dict[TaskReplica, str]:
    """Previous owners kept: each replica's, while it is present, in the task's pool and holds no other replica."""
    previous = context.previous_owners()
    members = {m.member_id: m for m in context.members}
    owners: dict[TaskReplica, str] = {}
    for task in tasks:
        if task.replicas <= 1:  # the common case, without the per-task set (100,000 tasks at scale)
            replica = replica_of((task.task_id, 0))
            member = members.get(previous.get(replica, ""))
            if member is not None and member.pool == task.pool:
                owners[replica] = member.member_id
            continue
        used: set[str] = set()
        for replica in task.replica_ids():
            member = members.get(previous.get(replica, ""))
            if member is not None and member.pool == task.pool and member.member_id not in used:
                owners[replica] = member.member_id
                used.add(member.member_id)
    return owners


def round_robin(
    tasks: list[TaskSpec], members: list[MemberInfo], owners: dict[TaskReplica, str], result: Assignment
) -> int:
    """Place unowned replicas on the eligible member with the fewest replicas, rotating through ties."""
    ids = [m.member_id for m in members]
    count = {m: 0 for m in ids}
    for member in owners.values():
        if member in count:
            count[member] += 1
    cursor, placed = 0, 0
    for task in tasks:
        for replica in task.replica_ids():
            if replica in owners:
                continue
            holding = {owners[r] for r in task.replica_ids() if r in owners}
            order = [ids[(cursor + k) % len(ids)] for k in range(len(ids))] if ids else []
            free = [m for m in order if m not in holding]
            if not free:
                result.unassigned[replica] = no_member_reason(task, len(ids))
                continue
            target = min(free, key=lambda m: count[m])
            owners[replica] = target
            count[target] += 1
            cursor = (ids.index(target) + 1) % len(ids)
            placed += 1
    return placed


def split_tasks(
    context: AssignmentContext,
    tasks: list[TaskSpec],
    owners: dict[TaskReplica, str],
    load_data: LoadData,
    stats: RoundStats,
    *,
    conf: LoadBalancerConfig,
) -> tuple[list[TaskSpec], list[TaskSplit], dict[str, BundleData]]:
    """Replace tasks over a split limit by their children; returns the new catalog and estimates."""
    names = find_bundles_to_split(load_data, conf, len(tasks))
    if not names:
        return tasks, [], {}
    by_id = {t.task_id: t for t in tasks}
    splits: list[TaskSplit] = []
    estimates: dict[str, BundleData] = {}
    for name in names:
        parent = by_id[name]
        try:
            split = split_task(parent, conf)
        except ValueError as exc:
            log.warning("group %s: cannot split %s: %s", context.group_id, name, exc)
            continue
        if split is None:
            log.info("group %s: %s is over a split limit but has no cut point", context.group_id, name)
            continue
        if any(c.task_id in by_id for c in split.children):
            log.warning("group %s: split of %s would clash with an existing task", context.group_id, name)
            continue
        splits.append(split)
        del by_id[name]
        shares = {c.task_id: child_share(parent, c) for c in split.children}
        estimates.update(estimate_children(load_data.bundle_data[name], shares))
        for child in split.children:
            by_id[child.task_id] = child
            if not conf.load_balancer_auto_unload_split_bundles_enabled:
                for replica in parent.replica_ids():
                    if replica in owners:
                        owners[TaskReplica(child.task_id, replica.replica)] = owners[replica]
        for replica in parent.replica_ids():
            owners.pop(replica, None)
        stats.split += 1
        log.info("group %s: split %s into %s", context.group_id, name, [c.task_id for c in split.children])
    return sorted(by_id.values(), key=lambda t: t.task_id), splits, estimates


def place(
    context: AssignmentContext,
    pstate: PoolState,
    load_data: LoadData,
    tasks: list[TaskSpec],
    member_ids: list[str],
    owners: dict[TaskReplica, str],
    result: Assignment,
    *,
    conf: LoadBalancerConfig,
) -> int:
    """Unowned replicas to the member the placement strategy picks, each choice preallocated."""
    placed = 0
    everyone = filter_candidates(member_ids, load_data, conf)
    counts = namespace_counts(tasks, owners)
    for task in tasks:
        replicas = task.replica_ids()
        for replica in replicas:
            if replica in owners:
                continue
            holding = {owners[r] for r in replicas if r in owners}
            candidates = [m for m in everyone if m not in holding] if holding else everyone
            candidates = _spread(task, candidates, counts, conf)
            target = pstate.placement.select_broker(candidates, task.task_id, load_data, conf, rng=context.rng)
            if target is None:
                result.unassigned[replica] = no_member_reason(task, len(member_ids))
                continue
            owners[replica] = target
            _count(task, target, counts)
            load_data.preallocate(target, task.task_id)
            placed += 1
    return placed


def shed(
    context: AssignmentContext,
    state: GroupState,
    pstate: PoolState,
    plan: dict[str, list[str]],
    load_data: LoadData,
    tasks: list[TaskSpec],
    member_ids: list[str],
    owners: dict[TaskReplica, str],
    stats: RoundStats,
    *,
    conf: LoadBalancerConfig,
    clock: Clock,
) -> None:
    """Re-place the shedder's ``plan`` (``{member: [task, ...]}``) with the placement strategy."""
    by_id = {t.task_id: t for t in tasks}
    everyone = filter_candidates(member_ids, load_data, conf)
    # As in Pulsar, an unloaded task still counts on its old owner until the next report.
    counts = namespace_counts(tasks, owners)
    now = clock()
    for member in sorted(plan):
        for task_id in plan[member]:
            task = by_id.get(task_id)
            if task is None:
                continue
            replica = next((r for r in task.replica_ids() if owners.get(r) == member), None)
            if replica is None:
                continue  # moved or gone since the shedder looked
            others = {owners[r] for r in task.replica_ids() if r in owners and r != replica}
            candidates = [m for m in everyone if m not in others] if others else everyone
            candidates = _spread(task, candidates, counts, conf)
            target = pstate.placement.select_broker(candidates, task_id, load_data, conf, rng=context.rng)
            if target is None or target == member:
                # Pulsar's doLoadShedding skips an unload whose destination is the current owner.
                stats.unload_skipped += 1
                continue
            owners[replica] = target
            _count(task, target, counts)
            load_data.preallocate(target, task_id)
            state.recently_unloaded[task_id] = now
            stats.unloaded += 1
            stats.moves.append((task_id, member, target))
            log.info("group %s: unloading %s from %s to %s", context.group_id, replica, member, target)


def pool_load_data(
    context: AssignmentContext,
    tasks: list[TaskSpec],
    owners: dict[TaskReplica, str],
    state: GroupState,
    estimates: dict[str, BundleData] | None = None,
) -> dict[str, LoadData]:
    """One ``LoadData`` per pool: its members and tasks only (pools never exchange tasks)."""
    out: dict[str, LoadData] = {}
    for pool in sorted({t.pool for t in tasks}):
        out[pool] = load_data_from_context(
            context,
            owners,
            members=[m for m in context.members if m.pool == pool],
            tasks=[t for t in tasks if t.pool == pool],
            recently_unloaded=state.recently_unloaded,
            bundle_overrides=estimates,
        )
    return out


def merged(views: Iterable[LoadData]) -> LoadData:
    """All pools' views as one (the split limit counts the whole group)."""
    whole = LoadData()
    for view in views:
        whole.broker_data.update(view.broker_data)
        whole.bundle_data.update(view.bundle_data)
    return whole


def no_member_reason(task: TaskSpec, n_members: int) -> str:
    return (
        f"replication factor {task.replicas} exceeds the {n_members} member(s) of pool {task.pool or '(default)'}"
        if n_members
        else f"no member in pool {task.pool or '(default)'}"
    )
