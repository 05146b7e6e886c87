"""Which shards this coordinator should take or hand over: pure decisions, no I/O.

Each coordinator runs ``plan`` on its own view of ZooKeeper (the live coordinators and each
shard's leader) and acts only on its own part of the answer; the per-shard elections settle
any disagreement between two stale views (one create wins). The rules:

* **Targets.** With ``m`` live coordinators and ``n`` shards each leads ``n // m``; ``n % m`` of
  them lead one more: those that already lead the most (ties by address), so a settled cluster
  is never reshuffled to move the "+1" around.
* **Free shards** (no leader) go to coordinators under their target, lowest count first (ties by
  address), one at a time in shard order: every coordinator computes the same hand-out, so each
  free shard is claimed by exactly one of them. A shard free for too long (``overdue``: its
  receiver is slow or gone) is taken by anyone who sees it so.
* **Hand-over.** Only when no shard is free: a coordinator over its target gives up its excess
  while some coordinator is under target, at most ``max_moves`` at a time, its highest-numbered
  shards first. The receiver of each is named (``receivers``) so unloading can hint it, and it
  takes the shard as a free one on its next look.

Worked example: shards 0-5 all led by ``a``; ``b`` joins. Targets: a 3, b 3. ``a`` hands over
5, 4 (``max_moves=2``) with receiver ``b``; ``b``, seeing 4 and 5 free, takes them; then 3.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

__all__ = ["Plan", "plan", "targets"]


@dataclass(frozen=True)
class Plan:
    """What ``me`` should do now; empty lists: nothing."""

    take: list[int] = field(default_factory=list)
    release: list[int] = field(default_factory=list)
    receivers: dict[int, str] = field(default_factory=dict)  # released shard -> who should take it


def targets(members: Collection[str], counts: Mapping[str, int], shards: int) -> dict[str, int]:
    """How many shards each live member should lead (sums to ``shards``)."""
    if not members:
        return {}
    base, extra = divmod(shards, len(members))
    ranked = sorted(members, key=lambda m: (-counts.get(m, 0), m))
    return {member: base + (1 if rank < extra else 0) for rank, member in enumerate(ranked)}


def plan(
    me: str,
    members: Collection[str],
    leaders: Mapping[int, str | None],
    shards: int,
    *,
    overdue: Collection[int] = (),
    max_moves: int = 2,
) -> Plan:
    """``leaders``: each shard's leader (None or absent: free). A leader that is not a live member
    counts as free too (its member node went first; its leader node follows with its session)."""
    live = set(members) | {me}
    owner = {s: leaders.get(s) for s in range(shards)}
    free = [s for s, who in owner.items() if who is None or who not in live]
    counts = {m: 0 for m in live}
    for who in owner.values():
        if who is not None and who in live:
            counts[who] += 1
    want = targets(live, counts, shards)
    if free:
        return Plan(take=_claims(me, free, counts, want, set(overdue)))
    excess = counts[me] - want[me]
    short = sorted((m for m in live if counts[m] < want[m]), key=lambda m: (counts[m], m))
    if excess <= 0 or not short:
        return Plan()
    mine = sorted((s for s, who in owner.items() if who == me), reverse=True)
    release = mine[:min(excess, max_moves)]
    receivers: dict[int, str] = {}
    room = {m: want[m] - counts[m] for m in short}
    queue = list(short)
    for shard in release:
        while queue and room[queue[0]] <= 0:
            queue.pop(0)
        if not queue:
            break
        receivers[shard] = queue[0]
        room[queue[0]] -= 1
    return Plan(release=release, receivers=receivers)


def _claims(me: str, free: list[int], counts: dict[str, int], want: dict[str, int], overdue: set[int]) -> list[int]:
    """The free shards ``me`` should take: its share of the common hand-out, plus every overdue one
    (better led by anyone than by no one; the balance is restored by hand-overs afterwards)."""
    under = [(count, m) for m, count in counts.items() if count < want[m]]
    heapq.heapify(under)  # the lowest count first, ties by address: O(log members) a shard, not O(members)
    handout: dict[int, str] = {}
    for shard in free:
        if not under:
            break
        count, receiver = heapq.heappop(under)
        handout[shard] = receiver
        if count + 1 < want[receiver]:
            heapq.heappush(under, (count + 1, receiver))
    return [s for s in free if handout.get(s) == me or s in overdue]
