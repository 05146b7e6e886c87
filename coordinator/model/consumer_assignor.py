"""Which server-side assignor a consumer-protocol group runs: the one most of its members name.

Members of one group may name different assignors (the request's ``assignor``, kept per member);
as Kafka's ``ConsumerGroup.computePreferredServerAssignor``, the group runs the name most of them
give, recomputed as members join, change their name and leave. A member naming none does not count;
a group where nobody names one runs the coordinator's default. Ties (which Kafka leaves to its map's
order) are broken so every coordinator chooses the same: the group keeps the assignor it runs if that
one is among the most named, else the smallest name. A ``client:<name>`` (leader-side) counts as any
other name.

A change of the group's assignor is a change of what the target is computed with: the caller moves the
group epoch, and the next target is a full pass of the new assignor (the incremental basis of the old
one and a leader's pending request are dropped here).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from groupcoord.assignors.registry import available_assignors
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_target import assignor_exists
from groupcoord.coordinator.model.effects import Outbox, TimerKey, error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["preferred", "named_of", "unsupported", "rechoose", "heard", "switched"]

log = logging.getLogger("groupcoord.consumer")
CLIENT_PREFIX = "client:"


def preferred(counts: Mapping[str, int], current: str, default: str) -> str:
    """The most named assignor (ties: ``current`` if among them, else the smallest name); ``default``
    when nobody names one."""
    most = max(counts.values(), default=0)
    if most <= 0:
        return default
    if counts.get(current, 0) == most:
        return current
    return min(name for name, count in counts.items() if count == most)


def named_of(request: pb.GroupHeartbeatRequest) -> str | None:
    """The assignor a request names: None when it does not say (unchanged), "" when it names none."""
    return request.assignor if request.HasField("assignor") else None


def unsupported(known: set[str], name: str | None) -> pb.Error | None:
    """UNSUPPORTED_ASSIGNOR for a name no assignor of this coordinator answers to, on any request
    that names one (as Kafka validates every heartbeat). ``known``: names already resolved (a cache)."""
    if not name or name in known:
        return None
    if not assignor_exists(name):
        return error(pb.UNSUPPORTED_ASSIGNOR, f"no assignor named {name!r} on this coordinator; known: "
                     f"{', '.join(available_assignors())}, or client:<name> for a leader-side one")
    known.add(name)
    return None


def rechoose(out: Outbox, group: ConsumerGroup, default: str) -> bool:
    """Set the group's assignor to the most named one; True when it changed (the caller moves the
    group epoch: the next target is a full pass of the new assignor)."""
    name = preferred(group.named, group.assignor, default)
    if name == group.assignor:
        return False
    log.info("group %s: assignor %s -> %s (the one most members name)", group.group_id, group.assignor, name,
             extra={"event": "assignor_changed", "group": group.group_id, "assignor": name, "previous": group.assignor})
    group.assignor = name
    group.target_catalog, group.target_index, group.failed_leader = None, None, ""  # no incremental basis
    if group.asked is not None:
        out.cancel(TimerKey("c-leader", group.group_id))  # a leader asked for the old assignor's target
        group.asked, group.asked_sent, group.computing = None, False, False
    return True


def heard(out: Outbox, group: ConsumerGroup, member: ConsumerMember, name: str | None, default: str) -> bool | None:
    """The assignor a member's request names (``name``; "" none, None not said): None when it is the one
    it named; else counted (its record written with the group's next write), and True when the group's
    assignor changed with it (the caller moves the group epoch)."""
    if name is None or name == member.assignor:
        return None
    group.rename(member, name)
    return rechoose(out, group, default)


def switched(computed_with: str, group: ConsumerGroup) -> bool:
    """Whether a target computed with ``computed_with`` came from another assignor than the group's now
    (a leader-side group's fallback runs the coordinator's assignor of the same name: not a switch)."""
    return computed_with.removeprefix(CLIENT_PREFIX) != group.assignor.removeprefix(CLIENT_PREFIX)
