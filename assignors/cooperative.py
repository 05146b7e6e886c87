"""Turning any assignment into the first step of a cooperative rebalance (KIP-429).

In a cooperative generation a member keeps running what it keeps. A replica that member A
runs may go to member B only after A has stopped it, so a move takes two generations: in
the first the assignment takes the replica away from A and gives it to nobody; A stops it
and re-joins; the next generation gives it to B. The coordinator refuses an assignment that
skips the first step.

``cooperative_step`` does that for any target assignment: every replica the target gives
to a member other than the ones running it now is held back. Assignors that already diff
against ``MemberInfo.owned`` return a valid first step, which it leaves unchanged.

Worked example: A runs t1 and t2, B is new; the target gives t1 to A and t2 to B. The first
step gives t1 to A and t2 to nobody; A revokes t2 and re-joins; in the next generation A owns
only t1, the same target is valid as it is, and B starts t2.
"""

from __future__ import annotations

from groupcoord.assignors.base import Assignment, AssignmentContext, RebalanceProtocol, TaskReplica

__all__ = ["COOPERATIVE", "EAGER", "cooperative_step", "running"]

EAGER = RebalanceProtocol.EAGER  # the names this module exported before the enum
COOPERATIVE = RebalanceProtocol.COOPERATIVE


def running(context: AssignmentContext) -> dict[TaskReplica, frozenset[str]]:
    """Who runs each replica now (in a cooperative context, each member's ``owned``)."""
    owners: dict[TaskReplica, set[str]] = {}
    for member in context.members:
        for replica in member.owned:
            owners.setdefault(replica, set()).add(member.member_id)
    return {replica: frozenset(who) for replica, who in owners.items()}


def cooperative_step(context: AssignmentContext, target: Assignment) -> Assignment:
    """``target`` with every replica held back that someone other than its new member still runs;
    in an eager context, ``target`` unchanged."""
    if context.rebalance_protocol != COOPERATIVE:
        return target
    owners = running(context)
    members = {
        member_id: [r for r in replicas if owners.get(r, frozenset()) <= {member_id}]
        for member_id, replicas in target.members.items()
    }
    return Assignment(members=members, unassigned=dict(target.unassigned), splits=list(target.splits))
