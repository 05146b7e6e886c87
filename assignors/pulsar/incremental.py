"""The ``pulsar-*`` rounds computed from the previous target alone: without a load snapshot, and under
the snapshot the last full pass read when nothing needs placing.

Without a snapshot (or with ``load_balancer_enabled`` off) a Pulsar round is sticky round-robin
(``steps.round_robin``): every replica stays where it is, and each one without a member goes, in
task order, to the member with the fewest replicas, ties broken by a cursor that turns past each
receiver. As in Pulsar, a member that joins gets no task already placed: a new broker waits for
the shedder, which needs a snapshot. So from the previous target only the replicas without a member
are visited: O(members) each instead of a pass over the whole catalog, and the same answer.

Under a snapshot (``settled_round``) the full pass places with the strategy and sheds on load built
from every task's figures. When the change only adds members to the default pool (nothing lost its
member, no task added or deleted) and the last full pass read this very snapshot with more than one
member (so the splitter and the shedder both had their say on it: its split list was empty and its
shedding plan is used up), that pass would keep every replica, place nothing, split nothing and
shed nothing: the previous target, with nothing for the newcomers, is its answer, in O(members).
Anything else (a member gone, a task in or out, a snapshot not read yet, a plan the re-check left
waiting) is the full pass.
"""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.incremental import TargetChange, plain_split
from groupcoord.assignors.pulsar.steps import GroupState

__all__ = ["sticky_round_robin", "settled_round"]

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


def settled_round(change: TargetChange, state: GroupState, shedding: bool) -> Target | None:
    """The full pass's answer under the snapshot it last read, when it has nothing to do (see above); else
    ``None``. ``shedding``: ``load_balancer_shedding_enabled``."""
    settled = state.settled
    if settled is None or change.removed or change.homeless:
        return None
    round_id, key, total = settled
    pool = state.pools.get("")
    if key != change.snapshot_key or total != change.total or pool is None:
        return None
    if shedding and (pool.plan_key != round_id or pool.plan):
        return None  # the shedder has not judged this snapshot with these members, or its plan waits
    split = plain_split(change)
    if split is None or split.unowned:
        return None
    return {**split.kept, **dict.fromkeys(split.pooled, frozenset())}
