"""The small parts around the shard elections: the cluster record, one shard's office and fencer for
its runtime and store, and a leader node's content.

``ShardOffice`` is the ``Office`` (and ``HandOver``) a shard's runtime is built with and
``ShardFencer`` what its ``ZooKeeperStore`` needs; both only ask ``ShardElections``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

if TYPE_CHECKING:
    from groupcoord.coordinator.ha.election import Fence
    from groupcoord.coordinator.ha.zk_store import Listing

__all__ = ["Leader", "ShardFencer", "ShardOffice", "ensure_cluster", "leader_of"]

log = logging.getLogger("groupcoord.ha.shards")


class ShardElections(Protocol):
    """What an office and a fencer ask of the shard elections (``shard_election.ShardElections``; named
    here as a Protocol so that this module does not import the one that imports it)."""

    def leads(self, shard: int) -> bool: ...
    def epoch(self, shard: int) -> int: ...
    def fence(self, shard: int) -> Fence: ...
    def hint(self, shard: int) -> str: ...
    def recheck(self, shard: int | None = None) -> None: ...
    def drained(self, shard: int) -> None: ...
    def listing(self, shard: int) -> Listing | None: ...


class Leader(NamedTuple):
    """A shard's ``leader`` node as read: who, with which epoch, the session that owns it, its version."""

    address: str
    epoch: int
    session: int
    version: int


def leader_of(data: bytes) -> tuple[str, int]:
    """(address, epoch) from a leader node's JSON; ("", 0) if it is not ours to read."""
    try:
        parsed = json.loads(data)
        return str(parsed["address"]), int(parsed.get("epoch", 0))
    except (ValueError, KeyError, TypeError):
        return "", 0


def ensure_cluster(client: KazooClient, root: str, shards: int) -> None:
    """Record the cluster's shard count at first start; raise ``ValueError`` (one line) if it differs."""
    path = f"{root.rstrip('/')}/cluster"
    client.ensure_path(root)
    try:
        client.create(path, json.dumps({"shards": shards}).encode())
        return
    except NodeExistsError:
        pass
    data, _ = client.get(path)
    try:
        recorded = int(json.loads(data)["shards"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"ZooKeeper node {path} is not a groupcoord cluster record: {data[:80]!r}") from None
    if recorded != shards:
        raise ValueError(f"the cluster at ZooKeeper {root} has {recorded} shards, this coordinator is configured with "
                         f"{shards}: start it with --shards {recorded} (the number is fixed at the cluster's first start)")


class ShardOffice:
    """The ``Office`` (and ``HandOver``) of one shard's runtime, read from the shard's election."""

    def __init__(self, elections: ShardElections, shard: int) -> None:
        self._elections = elections
        self.shard = shard
        self._watchers: list[Callable[[], object]] = []

    def in_office(self) -> bool:
        return self._elections.leads(self.shard)

    def term(self) -> int:
        return self._elections.epoch(self.shard)

    def active_address(self) -> str:
        return self._elections.hint(self.shard)

    def watch(self, on_change: Callable[[], object]) -> None:
        self._watchers.append(on_change)

    def stand_down(self) -> None:
        self._elections.recheck(self.shard)

    def drained(self) -> None:
        self._elections.drained(self.shard)

    def changed(self) -> None:
        for watcher in list(self._watchers):
            try:
                watcher()
            except Exception:
                log.exception("shard %d office watcher failed", self.shard)


class ShardFencer:
    """What ``ZooKeeperStore`` needs of an election, for one shard (a ``Fencer`` and ``Listed``)."""

    def __init__(self, elections: ShardElections, shard: int) -> None:
        self._elections = elections
        self._shard = shard

    def fence(self) -> Fence:
        return self._elections.fence(self._shard)

    def recheck(self) -> None:
        self._elections.recheck(self._shard)

    def listing(self) -> Listing | None:
        """The shard's groups as read with its win (``zk_store.Listed``)."""
        return self._elections.listing(self._shard)
