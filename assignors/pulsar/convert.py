"""Build Pulsar's ``LoadData`` from the statistics job's ``LoadSnapshot`` and the context's members.

The snapshot (``assignors.snapshot``) is the one data model shared with the load-statistics job;
this module is the only place that reads it. Mapping:

* member -> ``BrokerData``; its ``LocalBrokerData`` resources come from ``WorkerLoadStats``
  (usage and limit per resource; a member without a row, e.g. one that just joined, reports 0%).
* task -> ``BundleData`` from ``TaskLoadStats``: the short/long averages with their sample counts.
  A task without a row gets Pulsar's default stats (50 msg/s and 50 kB/s each way, 0 samples).
* the member's tasks are the replicas it owns in ``owners`` (default: the previous assignment);
  its ``last_stats`` per task are the task's *short-term* averages (the snapshot carries no
  single latest sample; Pulsar's ``lastStats`` is the latest one) and its msg rate/throughput
  totals their sums. Each replica of a replicated task is assumed to carry the task's whole load.
* ``TimeAverageBrokerData`` is the sum of the member's tasks' averages (Pulsar's ``reset``);
  ``WorkerLoadStats.long_*`` totals describe the ownership at snapshot time and are not used.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from operator import attrgetter

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.pulsar.data import (
    NUM_LONG_SAMPLES,
    NUM_SHORT_SAMPLES,
    BrokerData,
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageMessageData,
    default_bundle_stats,
    rates_of,
)
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats
from groupcoord.figures import LONG, RESOURCES, SHORT, averaged, limit_column, usage_column

__all__ = ["bundle_data_from_stats", "load_data_from_context", "load_data_from_snapshot", "snapshot_key"]


def snapshot_key(snapshot: LoadSnapshot) -> object:
    """What identifies one snapshot (a round): its id and creation time, else the object itself."""
    if snapshot.snapshot_id or snapshot.created_ms:
        return (snapshot.group_id, snapshot.snapshot_id, snapshot.created_ms)
    return ("object", id(snapshot))


def bundle_data_from_stats(stats: TaskLoadStats | None) -> BundleData:
    """A task's short- and long-term averages; Pulsar's defaults when the snapshot has none."""
    if stats is None:
        return BundleData()
    short = TimeAverageMessageData(NUM_SHORT_SAMPLES, min(stats.short_samples, NUM_SHORT_SAMPLES), *_short(stats))
    long = TimeAverageMessageData(NUM_LONG_SAMPLES, min(stats.long_samples, NUM_LONG_SAMPLES), *_long(stats))
    return BundleData(short_term_data=short, long_term_data=long, topics=stats.topics)


# A task's averaged rates in ``groupcoord.figures`` order, the order TimeAverageMessageData
# declares them in (positional construction: one per task and term each round, so it counts).
_short = attrgetter(*averaged(SHORT))
_long = attrgetter(*averaged(LONG))


_RESOURCES = tuple((r, attrgetter(usage_column(r), limit_column(r))) for r in RESOURCES)  # r -> (usage, limit)


def _local_broker_data(worker: WorkerLoadStats | None) -> LocalBrokerData:
    local = LocalBrokerData()
    if worker is not None:
        for resource, usage_and_limit in _RESOURCES:
            setattr(local, resource, ResourceUsage(*usage_and_limit(worker)))
    return local


def _bundle_stats(bd: BundleData, stats: TaskLoadStats | None) -> NamespaceBundleStats:
    """A task's latest stats as its member would report them: the short-term rates, the counts."""
    latest = NamespaceBundleStats(*rates_of(bd.short_term_data))
    if stats is not None:
        latest.topics, latest.producer_count, latest.consumer_count = stats.topics, stats.producers, stats.consumers
    return latest


def load_data_from_snapshot(
    snapshot: LoadSnapshot | None,
    members: Collection[str],
    tasks: Collection[str],
    member_tasks: Mapping[str, Collection[str]],
    *,
    recently_unloaded: Mapping[str, float] | None = None,
    bundle_overrides: Mapping[str, BundleData] | None = None,
) -> LoadData:
    """``LoadData`` for ``members`` and ``tasks``; ``member_tasks`` says who runs what now.

    ``bundle_overrides`` supplies estimates for tasks the snapshot does not know yet (split children).
    """
    task_rows: Mapping[str, TaskLoadStats] = snapshot.tasks if snapshot else {}
    worker_rows: Mapping[str, WorkerLoadStats] = snapshot.workers if snapshot else {}
    load_data = LoadData(
        recently_unloaded_bundles=dict(recently_unloaded or {}),
        round_id=snapshot_key(snapshot) if snapshot else None,
    )
    bundle_data, row_of = load_data.bundle_data, task_rows.get
    if bundle_overrides:
        for task_id in tasks:
            if task_id not in task_rows and task_id in bundle_overrides:
                bundle_data[task_id] = bundle_overrides[task_id]
            else:
                bundle_data[task_id] = bundle_data_from_stats(row_of(task_id))
    else:  # every round, for every task (100,000 at scale): ``bundle_data_from_stats`` inlined
        for task_id in tasks:
            stats = row_of(task_id)
            if stats is None:
                bundle_data[task_id] = BundleData()
                continue
            bundle_data[task_id] = BundleData(
                short_term_data=TimeAverageMessageData(
                    NUM_SHORT_SAMPLES, min(stats.short_samples, NUM_SHORT_SAMPLES), *_short(stats)),
                long_term_data=TimeAverageMessageData(
                    NUM_LONG_SAMPLES, min(stats.long_samples, NUM_LONG_SAMPLES), *_long(stats)),
                topics=stats.topics)
    default = default_bundle_stats()
    brokers, worker_of, tasks_of = load_data.broker_data, worker_rows.get, member_tasks.get
    for member in members:
        local = _local_broker_data(worker_of(member))
        owned = sorted(set(tasks_of(member, ())))
        local.update_bundle_data({t: _bundle_stats(bundle_data[t], row_of(t)) for t in owned if t in bundle_data})
        broker = BrokerData(local_data=local)
        broker.time_average_data.reset(local.bundles, bundle_data, default)
        brokers[member] = broker
    return load_data


def load_data_from_context(
    context: AssignmentContext,
    owners: Mapping[TaskReplica, str] | None = None,
    *,
    members: Collection[MemberInfo] | None = None,
    tasks: Collection[TaskSpec] | None = None,
    recently_unloaded: Mapping[str, float] | None = None,
    bundle_overrides: Mapping[str, BundleData] | None = None,
) -> LoadData:
    """``LoadData`` for the context (or a subset: one pool's ``members`` and ``tasks``).

    ``owners`` maps replicas to members (default ``context.previous_owners()`` restricted to
    current members and catalog tasks).
    """
    members = context.members if members is None else members
    tasks = context.tasks if tasks is None else tasks
    member_ids = [m.member_id for m in members]
    task_ids = [t.task_id for t in tasks]
    if owners is None:
        owners = context.previous_owners()
    present, known = set(member_ids), set(task_ids)
    member_tasks: dict[str, list[str]] = {m: [] for m in member_ids}
    for replica, member in owners.items():
        if member in present and replica.task_id in known:
            member_tasks[member].append(replica.task_id)
    return load_data_from_snapshot(
        context.load_snapshot,
        member_ids,
        task_ids,
        member_tasks,
        recently_unloaded=recently_unloaded,
        bundle_overrides=bundle_overrides,
    )
