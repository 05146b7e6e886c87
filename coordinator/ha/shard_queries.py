"""What the shard offices, stores and ``FindCoordinator`` ask of ``ShardElections`` (any thread): who
leads a shard, with which epoch and fence, where to send its requests. Read-only, under the lock; kept
apart so that the election module holds only the elections' own work."""

from __future__ import annotations

from groupcoord.coordinator.ha.election import Fence
from groupcoord.coordinator.ha.shard_offices import Leader
from groupcoord.coordinator.ha.zk_session import SessionTerms
from groupcoord.coordinator.storage.store import FencedError

__all__ = ["ShardQueries"]


class ShardQueries(SessionTerms):
    """The queries half of ``coordinator.ha.shard_election.ShardElections``, on the state it keeps."""

    _fences: dict[int, Fence]  # shards we lead (their fence), releasing ones included
    _releasing: dict[int, str]  # shard -> receiver, while handing over
    _leaders: dict[int, Leader]  # our view: the shards that have a leader node
    _members: list[str]

    def leads(self, shard: int) -> bool:
        with self._lock:
            self._pause_detected()
            return shard in self._fences and shard not in self._releasing

    def epoch(self, shard: int) -> int:
        with self._lock:
            return fence.epoch if (fence := self._fences.get(shard)) is not None else 0

    def fence(self, shard: int) -> Fence:
        """The checks a write of ``shard`` must carry (also while handing it over: its last writes land)."""
        with self._lock:
            self._pause_detected()
            fence = self._fences.get(shard)
            if fence is None:
                raise FencedError(f"{self.address} does not lead shard {shard}")
            return fence

    def hint(self, shard: int) -> str:
        """Where to send a shard's requests from here: the receiver while we hand it over, else its leader."""
        with self._lock:
            receiver = self._releasing.get(shard)
            if receiver:
                return receiver
            if not self._view_current:
                return ""
            leader = self._leaders.get(shard)
            return leader.address if leader is not None and leader.address != self.address else ""

    def leader(self, shard: int) -> tuple[str, int] | None:
        """The shard's leader as we know it; None while cut off from ZooKeeper (SUSPENDED or LOST): the one
        we last saw may have died since, and a worker told "no leader" asks another coordinator."""
        with self._lock:
            self._pause_detected()
            fence = self._fences.get(shard)
            if fence is not None:
                return self.address, fence.epoch
            if not self._view_current:
                return None
            known = self._leaders.get(shard)
            return (known.address, known.epoch) if known is not None and known.address != self.address else None

    def coordinators(self) -> list[str]:
        with self._lock:
            return sorted(set(self._members))

    def moves(self) -> dict[int, str]:
        with self._lock:
            return dict(self._releasing)
