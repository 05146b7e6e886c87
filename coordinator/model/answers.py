"""What the rebalance phases answer and the keys of their timers: a member's JoinGroup and
SyncGroup answers as the group stands, the leader's (completed off the loop), and parked calls
failed with an error. Moved out of ``coordinator.model.phases``, which still exports every name.

Timer keys: ``join/<g>`` (join phase), ``sync/<g>`` (members that never sync),
``session/<g>/<m>`` (member liveness), ``pending/<g>/<m>`` (ids handed out with
MEMBER_ID_REQUIRED and never used), ``expire/<g>`` (an empty group's retention).
"""

from __future__ import annotations

from functools import partial

from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot
from groupcoord.coordinator.model.effects import OK, Outbox, TimerKey, Token, error
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.coordinator.model.ownership import Owners, owned_index
from groupcoord.coordinator.model.slices import extend_in_slices
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "join_key",
    "sync_key",
    "expire_key",
    "session_key",
    "pending_key",
    "join_answer",
    "reply_join",
    "add_catalog",
    "sync_response",
    "fail_held",
]


def join_key(group_id: str) -> TimerKey:
    return TimerKey("join", group_id)


def sync_key(group_id: str) -> TimerKey:
    return TimerKey("sync", group_id)


def expire_key(group_id: str) -> TimerKey:
    return TimerKey("expire", group_id)


def session_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("session", group_id, member_id)


def pending_key(group_id: str, member_id: str) -> TimerKey:
    return TimerKey("pending", group_id, member_id)


# ---------------------------------------------------------------------- answers


def join_answer(group: Group, member_id: str = "", *, skip_assignment: bool = False) -> pb.JoinGroupResponse:
    """The JoinGroup answer of the current generation as ``member_id`` sees it (a follower's whole
    answer; the leader's gets more: ``reply_join``)."""
    return pb.JoinGroupResponse(
        error=OK,
        generation=group.generation,
        protocol=group.protocol,
        protocol_type=group.protocol_type,
        leader_id=group.leader_id,
        member_id=member_id,
        rebalance_protocol=group.rebalance_protocol,
        skip_assignment=skip_assignment,
    )


def reply_join(out: Outbox, token: Token | None, group: Group, member: Member, *,
               skip_assignment: bool = False, like: pb.JoinGroupResponse | None = None) -> None:
    """Answer ``member``'s JoinGroup with the current generation as it sees it; the leader also gets
    the members, the catalog and the load snapshot (those two copied off the loop: ``complete``).
    ``like``: the generation's follower answer without a member id (``join_answer``), built once by
    a phase's completion: a copy of it is a third of the cost of a new message, 10,000 times over."""
    if like is not None and not skip_assignment:
        response = pb.JoinGroupResponse()
        response.CopyFrom(like)
        response.member_id = member.member_id
    else:
        response = join_answer(group, member.member_id, skip_assignment=skip_assignment)
    complete = None
    if member.member_id == group.leader_id:
        described = response.members
        for other in group.members.values():  # each member copied once, into the answer itself
            described.add(member_id=other.member_id, instance_id=other.instance_id, client_id=other.client_id,
                          host=other.host, metadata=other.metadata)
        # what each member owns is the coordinator's record, not its claim; filled in off the loop
        # with the catalog (``owners`` is replaced at each generation, never changed in place)
        complete = partial(_complete_leader_join, response, group.owners, group.catalog_snapshot(),
                           group.load_snapshot)
    out.reply(token, group.group_id, response, complete)


def _complete_leader_join(response: pb.JoinGroupResponse, owners: Owners, catalog: CatalogSnapshot,
                          load_snapshot: pb.LoadSnapshot | None) -> None:
    owned = owned_index(owners)
    before = response.generation - 1
    for described in response.members:
        mine = owned.get(described.member_id)
        metadata = described.metadata
        if metadata.owned:  # the member's claim is replaced by the record: no leader reads a claim
            del metadata.owned[:]
            metadata.owned_generation = -1
        if mine:
            described.assigned.extend(mine)
            metadata.owned.extend(mine)
            metadata.owned_generation = before
    add_catalog(response, catalog, load_snapshot)


def add_catalog(response: pb.JoinGroupResponse | pb.DescribeGroupResponse, catalog: CatalogSnapshot,
                load_snapshot: pb.LoadSnapshot | None) -> None:
    """The heavy part of a leader's JoinGroup answer (or a DescribeGroup's): off the loop."""
    extend_in_slices(response.tasks, catalog.in_order())
    if load_snapshot is not None:
        response.load_snapshot.CopyFrom(load_snapshot)


def sync_response(group: Group, member_id: str) -> pb.SyncGroupResponse:
    """The member's tasks and the leader's bytes for it, unchanged (and the member is now told
    what it runs: ``Group.synced``)."""
    group.synced.add(member_id)
    response = pb.SyncGroupResponse(error=OK, generation=group.generation, protocol=group.protocol)
    tasks, user_data = group.assignment.get(member_id), group.user_data.get(member_id)
    if tasks:  # (set only when there is something: an empty list or bytes given still costs half the build)
        response.tasks.extend(tasks)
    if user_data:
        response.user_data = user_data
    if group.revoking:
        response.rejoin = True
    return response


def fail_held(out: Outbox, group: Group, member: Member, code: pb.ErrorCode, message: str) -> None:
    """Answer whatever ``member`` has parked with ``code``."""
    token = group.take_join(member)
    if token is not None:
        out.fail(token, group.group_id, pb.JoinGroupResponse, error(code, message))
    if member.sync_token is not None:
        out.fail(member.sync_token, group.group_id, pb.SyncGroupResponse, error(code, message))
        member.sync_token = None
