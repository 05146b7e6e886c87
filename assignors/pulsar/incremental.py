"""The ``pulsar-*`` round without a load snapshot, from the previous target alone.

Without a snapshot (or with ``load_balancer_enabled`` off) a Pulsar round is sticky round-robin
(``steps.round_robin``): every replica stays where it is, and each one without a member goes, in
task order, to the member with the fewest replicas, ties broken by a cursor that turns past each
receiver. As in Pulsar, a member that joins gets no task already placed: a new broker waits for
the shedder, which needs a snapshot. So from the previous target only the replicas without a member
are visited: O(members) each instead of a pass over the whole catalog, and the same answer.
"""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.incremental import TargetChange, plain_split

__all__ = ["sticky_round_robin"]

Target = dict[str, frozenset[TaskReplica]]


def sticky_round_robin(change: TargetChange) -> tuple[Target, int] | None:
    """The target and the replicas placed; ``None`` when the change is not a count of plain tasks
    (no member in the default pool, or a previous target that does not add up to the catalog)."""
    split = plain_split(change)
    if split is None:
        return None
    target: Target = {**split.kept, **dict.fromkeys(split.pooled, frozenset())}
    ids = list(split.kept)
    unowned = split.unowned
    count = [len(target[member_id]) for member_id in ids]
    gained: dict[int, list[TaskReplica]] = {}
    cursor = 0
    for replica in unowned:
        fewest = min(count)
        # the first member with the fewest in order from the cursor (``round_robin``'s ``min``)
        k = next((k for k in range(cursor, len(ids)) if count[k] == fewest), None)
        if k is None:
            k = count.index(fewest)
        gained.setdefault(k, []).append(replica)
        count[k] += 1
        cursor = (k + 1) % len(ids)
    for k, replicas in gained.items():
        target[ids[k]] = target[ids[k]].union(replicas)
    return target, len(unowned)
