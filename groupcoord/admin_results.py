"""What the admin client says and returns: its errors and the cluster-wide views (``groupcoord.admin``).

Kept apart so the client's module holds only how it asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from groupcoord import errors
from groupcoord.addresses import unreachable_by_tcp
from groupcoord.channels import failure_reason, probe
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["ClusterListing", "ClusterView", "CoordinatorUnreachableError", "Unimplemented", "Unreachable",
           "check_reachable", "none_answered"]



class Unreachable(Exception):
    """A call that did not reach a coordinator (refused, timed out): try another address."""


class CoordinatorUnreachableError(errors.CoordinatorNotAvailableError):
    """No address answered at all (refused, name not resolved, TLS, timed out): said at once, not retried
    until the call's timeout, for a wrong address is the likelier cause than a coordinator starting."""

    def __str__(self) -> str:
        return self.message


class Unimplemented(Exception):
    """The coordinator has no such RPC (an older version)."""


@dataclass
class ClusterListing:
    """Every group of the cluster, merged from the coordinators that lead shards."""

    groups: list[pb.GroupListing]
    failed: dict[str, str] = field(default_factory=dict)
    """Coordinators that lead shards but did not answer -> why (their groups are missing)."""
    leaderless_shards: int = 0
    """Shards with no leader right now (their groups are missing too)."""


@dataclass
class ClusterView:
    """The cluster as its coordinators see it: each shard as its own leader describes it."""

    mode: str
    shards: int
    asked: str
    """The address whose DescribeCluster listed the coordinators."""
    coordinators: list[pb.ClusterCoordinator]
    shard_infos: list[pb.ShardInfo]
    moves: list[pb.ShardMove]
    failed: dict[str, str] = field(default_factory=dict)
    """Coordinators that did not answer -> why (their shards show ``groups`` and ``members`` -1)."""


def none_answered(failures: list[str], unreachable: bool) -> errors.CoordinatorNotAvailableError:
    """The error when no address answered as the coordinator: ``unreachable`` when none answered at all."""
    if unreachable:
        return CoordinatorUnreachableError(f"no coordinator reached: {', '.join(failures)}")
    return errors.CoordinatorNotAvailableError(f"no active coordinator answered at {', '.join(failures)}")


def check_reachable(channel: grpc.Channel, address: str, connect_s: float) -> bool:
    """``Unreachable`` (with why) unless a health probe on the new ``channel`` reaches a server within
    ``connect_s``. True: the probe timed out but the port takes TCP connections, a coordinator slow to
    answer (a busy machine): the call should wait for the connection (``wait_for_ready``) for its whole
    timeout, for the channel now backs off after the probe's cut attempt and would fail it at once."""
    failed = probe(channel, connect_s)
    if failed is None:
        return False
    reason = failure_reason(failed.code(), failed.details() or "")
    if reason != "timed out":
        raise Unreachable(reason)
    if unreachable_by_tcp([address], connect_s):  # nothing takes a connection there
        raise Unreachable(f"timed out connecting ({connect_s:g} s)")
    return True
