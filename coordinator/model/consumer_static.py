"""Static members of a consumer-protocol group joining (epoch 0 with an instance id), after Kafka's
``GroupMetadataManager``: the rules a static worker restarted at once depends on.

* A member id the group knows is that member back (a join whose answer was lost, retried under the id
  the worker made, KIP-1082): it keeps its instance id; a join naming another (a second instance, or one
  on a dynamic member) is INVALID_REQUEST, as apache/kafka#23542 (else two entries would claim one id).
* An instance id held by a live member refuses any other member id: UNRELEASED_INSTANCE_ID (fatal for the
  worker, as for Kafka's consumer); one whose member left for a while (-2) is taken over, tasks included,
  with no new group epoch unless the newcomer's metadata differ.
"""

from __future__ import annotations

import logging

from groupcoord.coordinator.model.consumer_assignor import heard, named_of
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_steps import ConsumerSteps
from groupcoord.coordinator.model.effects import Outbox, TimerKey, Token, error
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["instance_changed", "rejoin"]

log = logging.getLogger("groupcoord.consumer")


def instance_changed(group: ConsumerGroup, request: pb.GroupHeartbeatRequest) -> pb.Error | None:
    """INVALID_REQUEST when a join names a member the group has under another instance id (or none)."""
    known = group.members.get(request.member_id) if request.member_id else None
    if known is None or not request.HasField("instance_id") or request.instance_id == known.instance_id:
        return None
    held = f"instance {known.instance_id!r}" if known.instance_id else "a dynamic member"
    return error(pb.INVALID_REQUEST, f"member {known.member_id} of group {group.group_id!r} is {held}, not "
                 f"instance {request.instance_id!r}: a member keeps its instance id (join with a new member id)")


def rejoin(cg: ConsumerSteps, out: Outbox, group: ConsumerGroup, request: pb.GroupHeartbeatRequest,
           token: Token) -> pb.Error | None:
    """The instance's member back (its own id), or a new process taking the place and the tasks of the
    instance's member that left for a while (-2); else the instance id is taken: UNRELEASED_INSTANCE_ID."""
    old = group.members[group.static_members[request.instance_id]]
    if not old.away and old.member_id == request.member_id:  # a retried join: its state, in full
        return cg._renewed(out, group, old, request, token)
    if not old.away:
        log.info("group %s: instance %s refused to %s: held by live member %s", group.group_id, request.instance_id,
                 request.member_id or "a new member", old.member_id,
                 extra={"event": "instance_unreleased", "group": group.group_id, "member": old.member_id})
        return error(pb.UNRELEASED_INSTANCE_ID, f"instance {request.instance_id!r} is held by live member "
                     f"{old.member_id} of group {group.group_id!r}; it must leave (or its session end) first")
    new_id = request.member_id or cg._new_member_id(request.instance_id)
    held = old.reconciled
    group.remove(old)
    out.cancel(TimerKey("c-session", group.group_id, old.member_id))
    member = ConsumerMember(
        member_id=new_id, instance_id=old.instance_id, client_id=request.client_id or old.client_id,
        host=old.host, principal=old.principal, metadata=old.metadata,
        session_timeout_ms=request.session_timeout_ms or old.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms or old.rebalance_timeout_ms, assignor=old.assignor)
    member.reconciled = Reconciled(MemberState.STABLE, held.epoch, frozenset())
    group.add(member)
    log.info("group %s: static member %s (instance %s) replaces %s (consumer protocol)", group.group_id, new_id,
             old.instance_id, old.member_id,
             extra={"event": "member_joined", "group": group.group_id, "member": new_id, "replaces": old.member_id})
    group.hold(member, Reconciled(MemberState.STABLE, held.epoch, held.assigned))
    if old.member_id in group.target:
        group.target[new_id] = group.target.pop(old.member_id)
    moved = heard(out, group, member, named_of(request), cg.settings.default_assignor)
    if request.HasField("metadata") and request.metadata != old.metadata:
        member.metadata = request.metadata
        group.refresh(member)
        moved = True
    if moved:
        cg._changed(out, group)
    cg._persist(out, group)
    return cg._renewed(out, group, member, request, token)
