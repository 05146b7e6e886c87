"""Admin operations on the model: list and describe groups, edit the task catalog, publish a
load snapshot, delete a group. Like the member requests they change groups only through the
state machine and return their answers (and writes) through the outbox.
"""

from __future__ import annotations

from collections.abc import Mapping

from groupcoord.coordinator.model import answers, limits, phases, quotas
from groupcoord.coordinator.model.consumer_describe import CLASSIC, overlay_description, overlay_listing
from groupcoord.coordinator.model.consumer_group import ConsumerGroup
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import Outbox, Token, error
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.prechecks import CatalogCheck, Verdict, check_catalog, snapshot_error
from groupcoord.coordinator.model.slices import extend_in_slices
from groupcoord.coordinator.model.states import GroupState
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "STATE_PB",
    "list_groups",
    "describe_group",
    "put_tasks",
    "delete_tasks",
    "publish_load_snapshot",
    "delete_group",
]

S = GroupState
STATE_PB = {
    S.EMPTY: pb.EMPTY,
    S.PREPARING_REBALANCE: pb.PREPARING_REBALANCE,
    S.AWAITING_SYNC: pb.AWAITING_SYNC,
    S.STABLE: pb.STABLE,
    S.DEAD: pb.DEAD,
}


def list_groups(m: Model, out: Outbox, request: pb.ListGroupsRequest, token: Token,
                consumer: Mapping[str, ConsumerGroup] | None = None) -> None:
    """``consumer``: the consumer-protocol groups, listed as what they are (``consumer_describe``)."""
    listings = []
    for g in sorted(m.groups.values(), key=lambda g: g.group_id):
        listing = pb.GroupListing(group_id=g.group_id, state=STATE_PB[g.state], generation=g.generation,
                                  num_members=len(g.members), protocol=g.protocol, group_type=CLASSIC)
        if consumer and g.group_id in consumer:
            overlay_listing(listing, consumer[g.group_id])
        listings.append(listing)
    out.reply(token, "", pb.ListGroupsResponse(groups=listings))


def describe_group(m: Model, out: Outbox, request: pb.DescribeGroupRequest, token: Token,
                   consumer: Mapping[str, ConsumerGroup] | None = None) -> None:
    failure = m.check_group_id(request.group_id)
    group = m.groups.get(request.group_id) if failure is None else None
    if failure is None and group is None:
        failure = error(pb.GROUP_ID_NOT_FOUND, f"no group {request.group_id!r}")
    if failure is not None or group is None:
        out.reply(token, "", pb.DescribeGroupResponse(error=failure))
        return
    now = m.clock.now()
    response = pb.DescribeGroupResponse(
        group_id=group.group_id,
        state=STATE_PB[group.state],
        generation=group.generation,
        protocol=group.protocol,
        leader_id=group.leader_id,
        members=[
            pb.DescribedMember(member=mb.to_pb(), last_seen_ms_ago=int(max(0.0, now - mb.last_seen) * 1000))
            for mb in group.members.values()
        ],
        unassigned=group.unassigned,
        last_error=group.last_error,
        group_type=CLASSIC,
    )
    consumer_group = consumer.get(group.group_id) if consumer else None
    consumer_part = overlay_description(response, consumer_group, now) if consumer_group is not None else None
    snap = group.load_snapshot
    if snap is not None and not request.include_load_snapshot:  # the per-worker figures only
        response.load_snapshot.CopyFrom(pb.LoadSnapshot(
            group_id=snap.group_id, snapshot_id=snap.snapshot_id, created_ms=snap.created_ms, workers=snap.workers,
        ))
        snap = None
    # an observer, too, sees only what is durable: the answer waits for the group's queued writes;
    # the catalog (and the whole snapshot, if asked for) is copied into it off the loop
    assigned = [tuple(group.assignment.get(mb.member_id, ())) for mb in group.members.values()]
    catalog = group.catalog_snapshot()

    def complete() -> None:
        if consumer_part is not None:
            consumer_part()
        else:
            for described, replicas in zip(response.members, assigned, strict=True):
                extend_in_slices(described.assigned, replicas)
        answers.add_catalog(response, catalog, snap)

    out.reply(token, group.group_id, response, complete)


def put_tasks(m: Model, out: Outbox, request: pb.PutTasksRequest, token: Token,
              checked: CatalogCheck | None = None, principal: str = "") -> None:
    """``checked``: the catalog checks and normalised tasks, when the service made them on a thread;
    ``principal``: who asks (a new group is its; the catalog counts against the group's creator)."""
    if checked is None:
        checked = check_catalog(m.config, request.tasks)
    failure = m.check_group_id(request.group_id) or checked.failure
    if failure is not None:
        out.reply(token, "", pb.PutTasksResponse(error=failure))
        return
    existing = m.groups.get(request.group_id)
    known = existing.tasks if existing is not None else {}
    if existing is not None and checked.base is not None and checked.base is existing.catalog_cache \
            and checked.base.version == existing.catalog_version:
        changed, new = checked.changed, checked.new  # compared off the loop with this very catalog
    else:
        changed = [task for task in checked.tasks if known.get(task.task_id) != task]
        new = sum(1 for task in changed if task.task_id not in known)
    total = len(known) + new
    if total > m.config.group_max_tasks:
        out.reply(token, "", pb.PutTasksResponse(error=error(
            pb.INVALID_REQUEST, f"group {request.group_id!r} would have {total} tasks; at most "
            f"{m.config.group_max_tasks} (group_max_tasks)")))
        return
    account = m.account_of(request.group_id, principal) if existing is None and principal else ""
    failure = (quotas.group_creation(m, account) if existing is None else None) \
        or quotas.tasks(m, existing.creator if existing is not None else account, new)
    if failure is not None:
        out.reply(token, "", pb.PutTasksResponse(error=failure))
        return
    group = existing or m.new_group(request.group_id, account, principal)
    if group.state is S.DEAD:
        out.reply(token, "", pb.PutTasksResponse(error=error(pb.COORDINATOR_NOT_AVAILABLE, "group is being removed")))
        return
    catalog = group.tasks
    for task in changed:
        catalog[task.task_id] = task
    if changed:
        _catalog_changed(m, out, group)
    out.reply(token, group.group_id, pb.PutTasksResponse(num_tasks=len(group.tasks)))


def delete_tasks(m: Model, out: Outbox, request: pb.DeleteTasksRequest, token: Token) -> None:
    def fail(failure: pb.Error) -> None:
        out.reply(token, "", pb.DeleteTasksResponse(error=failure))

    failure = m.check_group_id(request.group_id)
    if failure is not None:
        return fail(failure)
    group = m.groups.get(request.group_id)
    if group is None:
        return fail(error(pb.GROUP_ID_NOT_FOUND, f"no group {request.group_id!r}"))
    ids = list(request.task_ids)
    if len(set(ids)) != len(ids):
        return fail(error(pb.DUPLICATE_TASK, "a task id is given twice"))
    unknown = [t for t in ids if t not in group.tasks]
    if unknown:
        return fail(error(pb.UNKNOWN_TASK, f"{len(unknown)} unknown task(s): {limits.listed(unknown)}"))
    for task_id in ids:
        del group.tasks[task_id]
    if ids:
        _catalog_changed(m, out, group)
        phases.expire_later(m, out, group)
    out.reply(token, group.group_id, pb.DeleteTasksResponse(num_tasks=len(group.tasks)))


def _remove_everyone(out: Outbox, group: Group, reason: str) -> None:
    for member in list(group.members.values()):
        phases.fail_held(out, group, member, pb.UNKNOWN_MEMBER_ID, reason)
        phases.drop_member(out, group, member)
    for member_id in group.pending_members:
        group.pending_members.discard(member_id)
        out.cancel(phases.pending_key(group.group_id, member_id))
    for key in (phases.join_key(group.group_id), phases.sync_key(group.group_id), phases.expire_key(group.group_id)):
        out.cancel(key)


def _catalog_changed(m: Model, out: Outbox, group: Group) -> None:
    group.catalog_version += 1
    if group.state in (S.STABLE, S.AWAITING_SYNC):
        phases.prepare_rebalance(m, out, group, "task catalog changed")
    else:
        out.persist(group)


def publish_load_snapshot(m: Model, out: Outbox, request: pb.PublishLoadSnapshotRequest,
                          token: Token, checked: Verdict | None = None) -> None:
    """``checked``: the snapshot checks' verdict, when the service ran them on a thread."""
    gid = request.snapshot.group_id
    failure = m.check_group_id(gid)
    group = m.groups.get(gid) if failure is None else None
    if failure is None and group is None:
        failure = error(pb.GROUP_ID_NOT_FOUND, f"no group {gid!r}")
    if failure is not None or group is None:
        out.reply(token, "", pb.PublishLoadSnapshotResponse(error=failure))
        return
    failure = checked.failure if checked is not None else snapshot_error(m.config, request, m.clock.wall_ms())
    if failure is not None:
        out.reply(token, "", pb.PublishLoadSnapshotResponse(error=failure))
        return
    current = group.load_snapshot
    if current is None or request.snapshot.created_ms >= current.created_ms:  # older never replaces newer
        group.load_snapshot = request.snapshot
        out.persist(group)
    out.reply(token, gid, pb.PublishLoadSnapshotResponse())


def delete_group(m: Model, out: Outbox, request: pb.DeleteGroupRequest, token: Token, principal: str = "") -> None:
    """Only an Empty group, as Kafka's DeleteGroups; but the principal whose quotas a group counts
    against (its prefix's admin) may delete one another principal created (a member of its shared
    prefix) with its members in it: they are answered UNKNOWN_MEMBER_ID and must join again."""
    gid = request.group_id
    failure = m.check_group_id(gid)
    group = m.groups.get(gid) if failure is None else None
    if failure is None and group is None:
        failure = error(pb.GROUP_ID_NOT_FOUND, f"no group {gid!r}")
    elif group is not None and (group.state is not S.EMPTY or group.pending_members):
        if principal and group.founder and principal == group.creator:
            _remove_everyone(out, group, f"group deleted by {principal}, the admin of its name")
        else:
            failure = error(pb.NON_EMPTY_GROUP, f"group {limits.quoted(gid)} is {group.state.value}; it must be "
                            f"Empty (its name's admin may delete a group another principal created)")
    if failure is not None or group is None:
        out.reply(token, "", pb.DeleteGroupResponse(error=failure))
        return
    m.drop_group(group)
    out.forget(gid)
    out.reply(token, gid, pb.DeleteGroupResponse())
