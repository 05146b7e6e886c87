"""The sharded cluster's nodes in ZooKeeper, read watched and won: the I/O half of ``ShardElections``.

Every read sets a watch that names what it read, so the elections read again only what an event
names (``coordinator.ha.shard_election`` says why). ``reads`` counts the reads made, for the
benchmarks and tests that check a change costs O(1) reads per coordinator.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from groupcoord.coordinator.ha.election import Fence
from groupcoord.coordinator.ha.shard_offices import Leader, leader_of

__all__ = ["ViewReader"]

log = logging.getLogger("groupcoord.ha.shards")

Watch = Callable[[WatchedEvent], None]


class ViewReader:
    """The reads of one coordinator's view; called from its election thread only."""

    def __init__(self, client: KazooClient, root: str, shards: int, op_timeout: float, *,
                 on_leader: Watch, on_members: Watch) -> None:
        self._client = client
        self.root = root
        self.shards = shards
        self._op_timeout = op_timeout
        self._on_leader = on_leader
        self._on_members = on_members
        self.members_path = f"{root}/members"
        self.reads = 0
        self._prepared = False

    def shard_path(self, shard: int) -> str:
        return f"{self.root}/shards/{shard}"

    def member_path(self, address: str) -> str:
        return f"{self.members_path}/{quote(address, safe='')}"

    def _call(self, async_result: Any) -> Any:
        return async_result.get(timeout=self._op_timeout)

    def prepare(self) -> None:
        """The persistent nodes, once: members/, and each shard's node and epoch node (created if missing)."""
        if self._prepared:
            return
        c = self._client
        c.ensure_path(self.members_path)
        c.ensure_path(f"{self.root}/shards")
        checks = [(s, c.exists_async(f"{self.shard_path(s)}/epoch")) for s in range(self.shards)]
        self.reads += len(checks)
        missing = [s for s, result in checks if self._call(result) is None]
        for suffix in ("", "/epoch"):
            for result in [c.create_async(f"{self.shard_path(s)}{suffix}", b"") for s in missing]:
                try:
                    self._call(result)
                except NodeExistsError:
                    pass
        self._prepared = True

    def register(self, address: str, session: int | None) -> bool:
        """Our member node, in our session: True once it is there (False: wait for its watch)."""
        c = self._client
        member = self.member_path(address)
        self.reads += 1
        stat = self._call(c.exists_async(member, watch=self._on_members))
        if stat is None:
            try:
                self._call(c.create_async(member, address.encode(), ephemeral=True))
            except NodeExistsError:
                return False  # created meanwhile; its watch wakes us
            return True
        if stat.owner_session_id != session:
            log.info("%s: a previous incarnation's member node is still there; waiting for its session to end",
                     address)
            return False
        return True

    def members(self) -> list[str]:
        self.reads += 1
        names = self._call(self._client.get_children_async(self.members_path, watch=self._on_members))
        return sorted(unquote(n) for n in names)

    def leaders(self, shards: Iterable[int]) -> tuple[dict[int, Leader | None], list[int]]:
        """Each shard's leader node (None: free), watched: a data watch if there, an ``exists`` watch if
        not. Second: the shards whose node appeared between the two reads (to read again)."""
        c = self._client
        reads = [(s, c.get_async(f"{self.shard_path(s)}/leader", watch=self._on_leader)) for s in shards]
        found: dict[int, Leader | None] = {}
        absent = []
        for shard, result in reads:
            try:
                data, node = self._call(result)
            except NoNodeError:
                absent.append(shard)
                continue
            found[shard] = Leader(*leader_of(data), node.ephemeralOwner, node.version)
        checks = [(s, c.exists_async(f"{self.shard_path(s)}/leader", watch=self._on_leader)) for s in absent]
        self.reads += len(reads) + len(checks)
        again = []
        for shard, result in checks:
            if self._call(result) is None:
                found[shard] = None
            else:
                again.append(shard)
        return found, again

    def win(self, shard: int, address: str, leader_version: int | None) -> Fence | None:
        """Take ``shard``: create its leader node (or, ``leader_version`` given, rewrite ours) and bump its
        epoch, in one transaction. The fence, or None when somebody moved first."""
        c = self._client
        epoch_path, leader_path = f"{self.shard_path(shard)}/epoch", f"{self.shard_path(shard)}/leader"
        self.reads += 1
        _, epoch_stat = self._call(c.get_async(epoch_path))
        epoch = epoch_stat.version + 1
        payload = json.dumps({"address": address, "epoch": epoch, "host": socket.gethostname(),
                              "pid": os.getpid()}).encode()
        tx = c.transaction()
        if leader_version is None:
            tx.create(leader_path, payload, ephemeral=True)
        else:
            tx.set_data(leader_path, payload, version=leader_version)
        tx.set_data(epoch_path, json.dumps({"epoch": epoch, "address": address}).encode(), version=epoch_stat.version)
        if any(isinstance(r, Exception) for r in self._call(tx.commit_async())):
            return None
        return Fence(epoch, epoch_path, leader_path, 0 if leader_version is None else leader_version + 1)
