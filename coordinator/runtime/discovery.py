"""Discovery: where a group's coordinator is (FindCoordinator) and the cluster as this process sees it
(DescribeCluster), answered in one place for every kind of coordinator.

A process reads its cluster through a ``ClusterView``: a sharded one through ZooKeeper
(``coordinator.ha.shard_election.ShardElections``), an unsharded one (standalone, or active/standby)
through its only office (``OfficeView``): one shard, led by this process while it is in office, else
by the active the office names. So one set of rules answers both, and an unsharded coordinator is
just a cluster of one shard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from groupcoord.coordinator.model.effects import error
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.runtime.office import Office
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ClusterView", "OfficeView", "ShardState", "describe_cluster", "locate"]


class ClusterView(Protocol):
    """The cluster as this process sees it; cheap, thread-safe reads."""

    def leader(self, shard: int) -> tuple[str, int] | None:
        """The shard's leader (advertised address, epoch), None when it has none."""
        ...

    def coordinators(self) -> list[str]:
        """Every live coordinator's advertised address."""
        ...

    def moves(self) -> dict[int, str]:
        """Shards this process is handing over now -> the coordinator meant to take each ("" unknown)."""
        ...


class OfficeView:
    """The cluster of an unsharded coordinator, read off its only office: one shard, led by this
    process (``advertised``) in its term while in office, else by the active it names (epoch unknown)."""

    def __init__(self, office: Office, advertised: Callable[[], str]) -> None:
        self._office = office
        self._advertised = advertised

    def leader(self, shard: int) -> tuple[str, int] | None:
        if self._office.in_office():
            return self._advertised(), self._office.term()
        active = self._office.active_address()
        return (active, 0) if active else None

    def coordinators(self) -> list[str]:
        """This process first, then the active one if it is another."""
        ours, active = self._advertised(), self._office.active_address()
        return [ours, active] if active and active != ours and not self._office.in_office() else [ours]

    def moves(self) -> dict[int, str]:
        return {}


class ShardState(Protocol):
    """What discovery reads of one shard's runtime."""

    @property
    def loading(self) -> bool: ...

    @property
    def groups(self) -> dict[str, Group]: ...

    def member_count(self) -> int: ...


def locate(group_id: str, shards: int, view: ClusterView) -> pb.CoordinatorLocation:
    """FindCoordinator's answer for one group, from ``view``."""
    if not group_id:
        return pb.CoordinatorLocation(group_id=group_id, error=error(pb.INVALID_GROUP_ID, "empty group id"))
    shard = shard_of(group_id, shards)
    leader = view.leader(shard)
    if leader is None:
        why = f"shard {shard} has no leader right now" if shards > 1 else "no coordinator is active right now"
        return pb.CoordinatorLocation(group_id=group_id, shard=shard, error=error(
            pb.COORDINATOR_NOT_AVAILABLE, f"{why}, retry shortly"))
    return pb.CoordinatorLocation(group_id=group_id, address=leader[0], shard=shard, epoch=leader[1])


def describe_cluster(shards: Sequence[ShardState], view: ClusterView, advertised: str,
                     mode: str) -> pb.DescribeClusterResponse:
    """DescribeCluster's answer: each shard's leader and state (groups and members counted for the
    shards this process leads), each coordinator with the shards it leads, the hand-overs under way."""
    infos = []
    led: dict[str, int] = {}
    moves = view.moves()
    for shard, runtime in enumerate(shards):
        leader = view.leader(shard)
        address, epoch = leader if leader is not None else ("", 0)
        if address:
            led[address] = led.get(address, 0) + 1
        ours = address == advertised
        state = pb.SHARD_LEADERLESS if not address else pb.SHARD_ACTIVE
        if shard in moves:
            state = pb.SHARD_UNLOADING
        elif ours and address and runtime.loading:
            state = pb.SHARD_LOADING
        groups = runtime.groups
        infos.append(pb.ShardInfo(shard=shard, leader=address, epoch=epoch, state=state,
                                  groups=len(groups) if ours else -1,
                                  members=runtime.member_count() if ours else -1))
    coordinators = [pb.ClusterCoordinator(address=a, shards_led=led.get(a, 0), self=a == advertised)
                    for a in view.coordinators()]
    return pb.DescribeClusterResponse(
        shards=len(shards), mode=mode, coordinators=coordinators, shard_infos=infos,
        moves=[pb.ShardMove(shard=s, from_address=advertised, to_address=to) for s, to in sorted(moves.items())])
