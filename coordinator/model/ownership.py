"""Who may still run each task replica: the coordinator's own record, never a member's word.

A member's JoinGroup says what it runs (``MemberMetadata.owned``). A buggy or hostile member
can claim replicas it was never given; believed, such a claim blocks the replica from going to
anyone else in a cooperative generation, and the honest leader's assignment is refused again
and again (issue 26: 190 generations a second, the honest worker starved). So the claim only
ever *narrows* the coordinator's record; it never widens it.

The record of a member, as a new generation begins (``record_of``):

* what the coordinator assigned it in the generation that just ended, and
* if it never received that assignment (no SyncGroup answer), or did not re-join, also what
  it might still run from before (its entry in the previous ``owners``): it has not been told
  to stop those, or has not confirmed it stopped them.

A member that re-joined may still run ``record ∩ claim`` (a cooperative member that revoked a
replica stops claiming it: that is its confirmation). A member that did not re-join (a static
member away) may run its whole record. Claims beyond the record are ignored and reported.

The same record is what the leader is told each member owns (``GroupMember.assigned``), in
eager and cooperative generations alike, so an assignor's stickiness cannot be steered by
claims either.

Worked example: A was assigned t1 and t2, L is new and claims t1. As generation 5 begins, A's
record is {t1, t2}, L's is {}; A claims both, so ``owners`` is {t1: {A}, t2: {A}} and L's claim
of t1 is ignored. The leader may give t1 to L only after A revokes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Replica", "Owners", "record_of", "running", "owned_index", "by_member"]

Replica = tuple[str, int]
Owners = dict[Replica, frozenset[str]]


def by_member(owners: Mapping[Replica, frozenset[str]]) -> dict[str, set[Replica]]:
    """``owners`` turned around: each member's replicas (one pass over the catalog, not one per member)."""
    index: dict[str, set[Replica]] = {}
    for key, members in owners.items():
        for member_id in members:
            index.setdefault(member_id, set()).add(key)
    return index


def record_of(assigned: Iterable[pb.TaskReplica], before: AbstractSet[Replica], *, confirmed: bool) -> set[Replica]:
    """What the coordinator counts a member as possibly running as a generation ends: its last
    assignment, plus (unless ``confirmed``: it was answered that assignment and re-joined since)
    ``before``, what it might still run from earlier (its entries in the previous ``owners``)."""
    record = {(r.task_id, r.replica) for r in assigned}
    if not confirmed:
        record |= before
    return record


def running(records: Mapping[str, AbstractSet[Replica]], claims: Mapping[str, Iterable[pb.TaskReplica] | None],
            ) -> tuple[Owners, dict[str, list[Replica]]]:
    """Who may run each replica in the new generation, and each member's ignored claims.

    ``records``: each member's record (``record_of``). ``claims``: what each member that
    re-joined claims (None for a member that did not re-join: its whole record stands)."""
    who: dict[Replica, set[str]] = {}
    ignored: dict[str, list[Replica]] = {}
    for member_id, record in records.items():
        claimed = claims.get(member_id)
        if claimed is None:
            kept: Iterable[Replica] = record
        else:
            said = {(r.task_id, r.replica) for r in claimed}
            kept = said & record
            beyond = sorted(said - record)
            if beyond:
                ignored[member_id] = beyond
        for key in kept:
            who.setdefault(key, set()).add(member_id)
    return {key: frozenset(members) for key, members in who.items()}, ignored


def owned_index(owners: Mapping[Replica, frozenset[str]]) -> dict[str, list[pb.TaskReplica]]:
    """Each member's replicas in ``owners``, sorted (one pass, for the leader's JoinGroup answer)."""
    index: dict[str, list[pb.TaskReplica]] = {}
    for (task_id, replica), members in sorted(owners.items()):
        for member_id in members:
            index.setdefault(member_id, []).append(pb.TaskReplica(task_id=task_id, replica=replica))
    return index
