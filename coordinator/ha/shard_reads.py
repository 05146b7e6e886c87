"""The sharded cluster's nodes in ZooKeeper, read watched and won: the I/O half of ``ShardElections``.

Every read sets a watch that names what it read, so the elections read again only what an event
names (``coordinator.ha.shard_election`` says why). ``reads`` counts the reads made, for the
benchmarks and tests that check a change costs O(1) reads per coordinator.

A failover waits on these round trips, so none is made that is not needed: a shard whose watch said
its leader node was deleted is checked with ``exists`` alone (a ``get`` would only fail), and a win
bumps the epoch from the version last seen in the leader node (``epoch`` in its JSON is the epoch
node's version), reading the epoch node only when that is unknown or stale: the transaction still
checks the version, so a wrong guess fails and is retried, never wins. ``wins`` keeps, per shard,
when its last win's step noticed, began, read and won (``WinTimes``), for the benchmark that splits a
failover's time into its parts.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from groupcoord.coordinator.ha.election import Fence
from groupcoord.coordinator.ha.shard_offices import Leader, leader_of

__all__ = ["ViewReader", "WinTimes"]

log = logging.getLogger("groupcoord.ha.shards")

Watch = Callable[[WatchedEvent], None]


class WinTimes(NamedTuple):
    """When the step that won a shard noticed its cause, began, had its reads and won (``monotonic``)."""

    noticed: float  # the first watch event it answers reached us (kazoo's thread), else ``began``
    began: float
    read: float
    won: float


class ViewReader:
    """The reads of one coordinator's view; called from its election thread only."""

    def __init__(self, client: KazooClient, root: str, shards: int, op_timeout: float, *,
                 on_leader: Watch, on_members: Watch, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self.root = root
        self.shards = shards
        self._op_timeout = op_timeout
        self._notify_leader = on_leader
        self._notify_members = on_members
        self._monotonic = monotonic
        self.members_path = f"{root}/members"
        self.reads = 0
        self._prepared = False
        self._epochs: dict[int, int] = {}  # shard -> its epoch as last seen in its leader node
        self._deleted: set[int] = set()  # shards whose watch said the leader node was deleted
        self._stamp_lock = threading.Lock()
        self._noticed: float | None = None  # first event not yet taken by a step
        self._noticed_then = self._began = self._read = 0.0  # the current step's
        self.wins: dict[int, WinTimes] = {}  # shard -> its last win's times (one per shard: bounded)

    # -- watches (kazoo's thread) and the step's clock (the election thread) -------------------------

    def _on_leader(self, event: WatchedEvent) -> None:
        self._stamp()
        if event.type == EventType.DELETED:
            try:
                self._deleted.add(int(event.path.rsplit("/", 2)[-2]))
            except (ValueError, IndexError, AttributeError):
                pass
        self._notify_leader(event)

    def _on_members(self, event: WatchedEvent) -> None:
        self._stamp()
        self._notify_members(event)

    def _stamp(self) -> None:
        with self._stamp_lock:
            if self._noticed is None:
                self._noticed = self._monotonic()

    def begin(self) -> None:
        """A step takes the events noticed so far (call where it takes what they marked)."""
        with self._stamp_lock:
            self._began = self._read = self._monotonic()
            self._noticed_then = self._began if self._noticed is None else self._noticed
            self._noticed = None

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
        shards = list(shards)
        gone = [s for s in shards if s in self._deleted]  # a get would fail: go straight to exists
        self._deleted.difference_update(gone)
        gone_checks = [(s, c.exists_async(f"{self.shard_path(s)}/leader", watch=self._on_leader)) for s in gone]
        reads = [(s, c.get_async(f"{self.shard_path(s)}/leader", watch=self._on_leader))
                 for s in shards if s not in set(gone)]
        found: dict[int, Leader | None] = {}
        absent = []
        for shard, result in reads:
            try:
                data, node = self._call(result)
            except NoNodeError:
                absent.append(shard)
                continue
            found[shard] = leader = Leader(*leader_of(data), node.ephemeralOwner, node.version)
            if leader.epoch > 0:
                self._epochs[shard] = leader.epoch
        checks = [(s, c.exists_async(f"{self.shard_path(s)}/leader", watch=self._on_leader)) for s in absent]
        self.reads += len(gone_checks) + len(reads) + len(checks)
        again = []
        for shard, result in [*gone_checks, *checks]:
            if self._call(result) is None:
                found[shard] = None
            else:
                again.append(shard)  # there again already: read it (with a data watch) on the next step
        self._read = self._monotonic()
        return found, again

    def win(self, shard: int, address: str, leader_version: int | None) -> Fence | None:
        """Take ``shard``: create its leader node (or, ``leader_version`` given, rewrite ours) and bump its
        epoch, in one transaction. The fence, or None when somebody moved first."""
        epoch_path, leader_path = f"{self.shard_path(shard)}/epoch", f"{self.shard_path(shard)}/leader"
        seen = self._epochs.get(shard)
        for guessed in ((True, False) if seen is not None else (False,)):
            if not guessed:
                self.reads += 1
                seen = self._call(self._client.get_async(epoch_path))[1].version
            assert seen is not None
            results = self._commit_win(epoch_path, leader_path, address, seen, leader_version)
            if not any(isinstance(r, Exception) for r in results):
                self._epochs[shard] = seen + 1
                self.wins[shard] = WinTimes(self._noticed_then, self._began, self._read, self._monotonic())
                return Fence(seen + 1, epoch_path, leader_path, 0 if leader_version is None else leader_version + 1)
            if not isinstance(results[1], BadVersionError):
                return None  # the leader node: somebody moved first
            self._epochs.pop(shard, None)  # the epoch moved on since we saw it: read it and try once more
        return None

    def _commit_win(self, epoch_path: str, leader_path: str, address: str, version: int,
                    leader_version: int | None) -> list[Any]:
        """The win's transaction with the epoch node at ``version``; its results (exceptions if it failed)."""
        epoch = version + 1
        payload = json.dumps({"address": address, "epoch": epoch, "host": socket.gethostname(),
                              "pid": os.getpid()}).encode()
        tx = self._client.transaction()
        if leader_version is None:
            tx.create(leader_path, payload, ephemeral=True)
        else:
            tx.set_data(leader_path, payload, version=leader_version)
        tx.set_data(epoch_path, json.dumps({"epoch": epoch, "address": address}).encode(), version=version)
        results: list[Any] = self._call(tx.commit_async())
        return results
