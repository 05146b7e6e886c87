"""Whether a shard election step may plan on the departures its watch events named, without waiting
for its read of the members: pure decisions, no I/O (``coordinator.ha.shard_election`` acts on them).
Off by default (``PLAN_ON_DEPARTURE``, the measurements below): every step then reads first.

A coordinator's death ends its ZooKeeper session, which deletes its member node and its leader nodes
in one transaction. Each member node is watched one by one, so its deletion event names who left
(the members' children event does not). One departure alone is safe to plan on at once: the plan
is "the members we knew, less that one", and the claims go out with the members' read still in
flight, which saves a round trip (issue 37: the survivors' part after the expiry). The read's answer
replaces the assumed membership right after the claims, so a guess that missed something (a join
meanwhile) costs a later step, never a wrong fence: each claim is still its own transaction.

Several departures close together are a burst (ten coordinators dying at once): their events come
one session at a time, and survivors acting on each in turn plan on partial views, so that claims
fail, race and are evened out by hand-overs, each a step of every survivor (measured: 29.6 s and
697 writes for ten at once, against 15-21 s and 100-160 when reading first). In a burst, and
whenever a freed shard's last leader has not been named as departed (a graceful hand-over, or its
member node's event not in yet), the step waits for the read as before. A burst's first departure
looks alone when it is named, so a step plans on it only once no node's deletion has been notified
for ``quiet_s`` (ZooKeeper sends the next sessions' deletions right behind the first's; creations,
the other survivors' claims, do not count: they keep coming through a failover); if the read
answers first, the read is used. Counting every event, the full-size run waited for the read most
of the time (the claim part 1.41 s p50 at load 78). Measured at half size (50 coordinators), planning at
once cost ten deaths 16.6 s against 14.8 s reading first: the first survivors' steps claimed on
the first death alone, and the other nine waited behind those claims (queued 1.72 s p50, was 0.00).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

__all__ = ["Departures"]

# Off: at full size (100 coordinators, three runs) it made ten deaths at once slower (21.5-27.2 s against
# 15.4-23.6 s reading first) without a gain for one death there; on: ``election_sim.py --plan-on-departure``.
PLAN_ON_DEPARTURE = False


class Departures:
    """When this coordinator's steps last took a named departure: a burst is told from a lone death."""

    def __init__(self, burst_s: float, quiet_s: float = 0.1) -> None:
        """``burst_s``: a departure named within this long of the previous one is part of a burst;
        ``quiet_s``: how long no deletion must have been notified before planning on one departure."""
        self._burst_s = burst_s
        self.quiet_s = quiet_s
        self._last: float | None = None  # when a step last took a named departure

    def took(self, departed: Collection[str], now: float) -> None:
        """A step took these named departures (whichever way it planned)."""
        if departed:
            self._last = now

    def members_now(self, me: str, known: Collection[str], departed: Collection[str], vacated: Iterable[str],
                    now: float, last_deletion: float = float("-inf")) -> list[str] | None:
        """The members to plan on before the read answers, or None: wait (for the read, or quiet).

        ``known``: the members as last read; ``departed``: named since (this step's, all of them);
        ``vacated``: the last leaders (others than ``me``) of the shards this step found freed;
        ``last_deletion``: when the last node's deletion was notified."""
        if not PLAN_ON_DEPARTURE or len(departed) != 1 or (self._last is not None and now - self._last < self._burst_s):
            return None  # nothing named (a join, or the departure's event not in yet), or a burst
        if now - last_deletion < self.quiet_s:
            return None  # deletions still coming: other sessions may be ending in the same tick
        (gone,) = departed
        if gone == me or gone not in known or any(leader != gone and leader in known for leader in vacated):
            return None  # not one we knew, or a live member gave a shard up too: only the read tells
        return sorted(set(known) - {gone})
