"""The sharded cluster's nodes in ZooKeeper, read watched and won: the I/O half of ``ShardElections``.

Every read sets a watch that names what it read, so the elections read again only what an event
names (``coordinator.ha.shard_election`` says why). ``reads`` counts the reads made, for the
benchmarks and tests that check a change costs O(1) reads per coordinator.

A failover waits on these round trips, so none is made that is not needed: a step's reads go out
together (the members with the leader nodes); a shard whose watch said its leader node was deleted
is free at once (its ``exists`` watch is set in the same pipeline, and only looked at after the
step has claimed: a node there again makes the claim fail and the shard be read again); and a win
bumps the epoch from the version last seen in the leader node (``epoch`` in its JSON is the epoch
node's version), reading the epoch node only when that is unknown or stale: the transaction still
checks the version, so a wrong guess fails and is retried, never wins. Each member node is watched
too (``exists``, set when a members' read first lists it): its deletion names who left, which the
members' children event does not (``take_departed``; ``coordinator.ha.departures`` says what for).

A won shard's load is the largest part of a failover (issue 37), so its groups are read while the
claim is in flight: a claim's pipeline is ``exists(leader)``, the groups' listing, then the
transaction, and the records the listing names are read (``RECORDS_AHEAD`` per pipeline) as soon as
it answers, before the transaction's answer is waited for. What was read ahead is served only if the
claim won *and* its ``exists`` found no leader node: then no group could be written between that read
and the win (a write needs a leader node, and a leader node needs a win, which moves the epoch the
claim checked), so the listing and the records are what any later read would see. Otherwise the
store reads for itself. A re-win of our own node lists after its transaction. The store takes what
was read (``listing``) instead of round trips of its own. ``wins`` keeps, per shard,
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
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from groupcoord.coordinator.ha.election import Fence
from groupcoord.coordinator.ha.shard_offices import Leader, leader_of
from groupcoord.coordinator.ha.zk_store import Listing

__all__ = ["Reads", "ViewReader", "WinTimes"]

log = logging.getLogger("groupcoord.ha.shards")

Watch = Callable[[WatchedEvent], None]
CLAIMS_AT_ONCE = 16  # a failover's survivor claims one or two; a cold start's first one, every shard
READS_AT_ONCE = 256  # a whole view's reads in flight at once: thousands delayed the pings past their deadline
RECORDS_AHEAD = 256  # group records read ahead of a claims' pipeline's answers (0: none); the store reads the rest


class Reads(NamedTuple):
    """One step's reads: the members (None: not read), each shard's leader (None: free), and the free
    shards' ``exists`` watches still in flight (``ViewReader.settle``)."""

    members: list[str] | None
    found: dict[int, Leader | None]
    unsettled: list[tuple[int, Any]]


class Claim(NamedTuple):
    """One claim's requests in flight: its transaction, the groups' listing, and the ``exists`` of the
    leader node sent before that listing (None: the listing was sent after the transaction)."""

    tx: Any
    listing: Any
    before: Any | None


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
        self.last_deletion = float("-inf")  # when the last event of a node's deletion reached us
        self._noticed_then = self._began = self._read = 0.0  # the current step's
        self.wins: dict[int, WinTimes] = {}  # shard -> its last win's times (one per shard: bounded)
        self._listings: dict[int, Listing] = {}  # shard -> its groups as read with our win of it (taken once)
        self._watched: set[str] = set()  # members whose own node we watch (under ``_stamp_lock``)
        self._departed: list[str] = []  # members whose node's deletion an event named, not yet taken
        self.news = threading.Event()  # a member node's event, or a members' read answered

    # -- watches (kazoo's thread) and the step's clock (the election thread) -------------------------

    def _on_leader(self, event: WatchedEvent) -> None:
        self._stamp(event.type == EventType.DELETED)
        if event.type == EventType.DELETED:
            try:
                self._deleted.add(int(event.path.rsplit("/", 2)[-2]))
            except (ValueError, IndexError, AttributeError):
                pass
        self._notify_leader(event)

    def _on_members(self, event: WatchedEvent) -> None:
        self._stamp()
        self._notify_members(event)

    def _on_member(self, event: WatchedEvent) -> None:
        """One member node's own watch: a deletion names who left (the children event does not)."""
        self._stamp(event.type == EventType.DELETED)
        name = unquote((event.path or "").rsplit("/", 1)[-1])  # no path: the session's end (kazoo's own event)
        with self._stamp_lock:
            self._watched.discard(name)  # fired: the next members' read that lists it watches it again
            if event.type == EventType.DELETED and name:
                self._departed.append(name)
        self.news.set()
        self._notify_members(event)

    def take_departed(self) -> list[str]:
        """The members named as departed by their node's event since the last call (the election thread)."""
        with self._stamp_lock:
            taken, self._departed = self._departed, []
        return taken

    def give_back(self, names: list[str]) -> None:
        """Departures a step took but planned on a read older than (it listed them): the next step's."""
        with self._stamp_lock:
            self._departed[:0] = names

    def forget_member_watches(self) -> None:
        """Watch every member's node again on the next read (a whole view's read: watches may be gone)."""
        with self._stamp_lock:
            self._watched.clear()

    def _stamp(self, deletion: bool = False) -> None:
        with self._stamp_lock:
            now = self._monotonic()
            self.last_deletion = now if deletion else self.last_deletion
            if self._noticed is None:
                self._noticed = now

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

    def read(self, shards: Iterable[int], *, members: bool, held: Collection[int] = ()) -> Reads:
        """``read_members_later``, then the members' read waited for."""
        reads, pending = self.read_members_later(shards, members=members, held=held)
        if pending is None:
            return reads
        return reads._replace(members=self.members_of(pending))

    def read_members_later(self, shards: Iterable[int], *, members: bool,
                           held: Collection[int] = ()) -> tuple[Reads, Any | None]:
        """What changed, in one pipeline: the members' names (if asked) and each shard's leader node
        (None: free), watched: a data watch if it is there, an ``exists`` watch if not. A free shard is
        not waited for: its ``exists`` is in flight while the step acts (``settle`` it afterwards).
        ``held``: shards we lead, always read (a deletion event may be older than our win of it). A
        deleted leader node makes the members be read too: if its session ended, its member node went
        in the same transaction, and a plan that still counted that member would hand it free shards.
        A whole view is read ``READS_AT_ONCE`` shards at a time, each pipeline waited for. The members'
        read is returned in flight (its async result, None if not sent): ``members_of`` waits for it."""
        c = self._client
        shards = list(shards)
        deleted = self._deleted.intersection(shards)
        self._deleted.difference_update(deleted)  # taken by this step, whichever way it reads them
        gone = {s for s in deleted if s not in held}  # a get would only fail
        members = members or bool(gone)  # its leader's session may have ended: its member node went with it
        names = c.get_children_async(self.members_path, watch=self._on_members) if members else None
        found: dict[int, Leader | None] = dict.fromkeys(gone)
        unsettled = [(s, self._watch_free(s)) for s in sorted(gone)]
        for start in range(0, len(shards), READS_AT_ONCE):
            self._read_leaders([s for s in shards[start:start + READS_AT_ONCE] if s not in gone], found, unsettled)
            if len(shards) > READS_AT_ONCE:  # a whole view: keep the connection's backlog (and its pings) short
                for _, result in unsettled:
                    self._call(result)
        self.reads += (names is not None) + len(shards) - len(gone) + len(unsettled)
        if names is not None:
            names.rawlink(lambda _: self.news.set())
        self._read = self._monotonic()
        return Reads(None, found, unsettled), names

    def members_of(self, pending: Any) -> list[str]:
        """The members' read's answer (waited for), and each member it lists newly watched on its own
        node (an ``exists`` watch, not waited for: its deletion names the member that left)."""
        names = sorted(unquote(n) for n in self._call(pending))
        self._read = self._monotonic()  # the step's reads are in (a win stamps it: ``WinTimes``)
        with self._stamp_lock:
            new = [n for n in names if n not in self._watched]
            self._watched.update(new)
        for name in new:
            self._client.exists_async(self.member_path(name), watch=self._on_member)
        self.reads += len(new)
        return names

    def _read_leaders(self, shards: list[int], found: dict[int, Leader | None], unsettled: list[tuple[int, Any]]) -> None:
        """Each shard's leader node into ``found`` (watched); a free one's ``exists`` onto ``unsettled``."""
        reads = [(s, self._client.get_async(f"{self.shard_path(s)}/leader", watch=self._on_leader)) for s in shards]
        for shard, result in reads:
            try:
                data, node = self._call(result)
            except NoNodeError:
                found[shard] = None
                unsettled.append((shard, self._watch_free(shard)))
                continue
            found[shard] = leader = Leader(*leader_of(data), node.ephemeralOwner, node.version)
            if leader.epoch > 0:
                self._epochs[shard] = leader.epoch
            if (ours := self._listings.get(shard)) is not None and ours.epoch < leader.epoch:
                self._listings.pop(shard, None)  # a later term's: what we read ahead is nobody's to load now

    def _watch_free(self, shard: int) -> Any:
        return self._client.exists_async(f"{self.shard_path(shard)}/leader", watch=self._on_leader)

    def settle(self, unsettled: list[tuple[int, Any]]) -> list[int]:
        """The shards read as free whose leader node was there again when its watch was set (read them)."""
        return [shard for shard, result in unsettled if self._call(result) is not None]

    def win(self, claims: Mapping[int, int | None], address: str) -> Iterator[tuple[int, Fence | None]]:
        """Take each shard: create its leader node (or, its version given, rewrite ours) and bump its
        epoch, in one transaction per shard, pipelined ``CLAIMS_AT_ONCE`` at a time (a cold start's
        first coordinator claims every shard: not thousands of requests at once). Yields each one's
        fence, or None when somebody moved first, as its pipeline completes."""
        items = list(claims.items())
        for start in range(0, len(items), CLAIMS_AT_ONCE):
            yield from self._win_together(dict(items[start:start + CLAIMS_AT_ONCE]), address).items()

    def _win_together(self, claims: Mapping[int, int | None], address: str) -> dict[int, Fence | None]:
        """``win`` in one pipeline. A shard whose epoch we guessed wrong is read and tried once more."""
        unknown = [(s, self._client.get_async(f"{self.shard_path(s)}/epoch")) for s in claims if s not in self._epochs]
        self.reads += len(unknown)
        seen = {s: self._epochs[s] for s in claims if s in self._epochs}
        seen.update((s, self._call(result)[1].version) for s, result in unknown)
        read_now = {s for s, _ in unknown}
        pending = {s: self._send_claim(s, address, seen[s], claims[s]) for s in claims}
        ahead = self._read_ahead(pending)
        out: dict[int, Fence | None] = {}
        stale: dict[int, int | None] = {}
        for shard, claim in pending.items():
            results = self._call(claim.tx)
            base, leader_version = f"{self.shard_path(shard)}", claims[shard]
            if not any(isinstance(r, Exception) for r in results):
                self._epochs[shard] = seen[shard] + 1
                self._listings.pop(shard, None)
                if shard in ahead:
                    self._listings[shard] = Listing(seen[shard] + 1, *ahead[shard])
                self.wins[shard] = WinTimes(self._noticed_then, self._began, self._read, self._monotonic())
                out[shard] = Fence(seen[shard] + 1, f"{base}/epoch", f"{base}/leader",
                                   0 if leader_version is None else leader_version + 1)
            elif isinstance(results[1], BadVersionError) and shard not in read_now:
                self._epochs.pop(shard, None)  # the epoch moved on since we saw it: read it, try once more
                stale[shard] = leader_version
            else:
                out[shard] = None  # the leader node: somebody moved first
        if stale:
            out.update(self._win_together(stale, address))
        return out

    def _send_claim(self, shard: int, address: str, version: int, leader_version: int | None) -> Claim:
        """A claim's requests, sent: a take reads ahead of its transaction, a re-win lists after it."""
        groups = f"{self.shard_path(shard)}/groups"
        if leader_version is not None:
            tx = self._commit_win(shard, address, version, leader_version)
            return Claim(tx, self._client.get_children_async(groups), None)
        before = self._client.exists_async(f"{self.shard_path(shard)}/leader")
        listing = self._client.get_children_async(groups)
        return Claim(self._commit_win(shard, address, version, None), listing, before)

    def _read_ahead(self, claims: Mapping[int, Claim]) -> dict[int, tuple[list[str], dict[str, Any]]]:
        """Per claim whose listing holds (see the module): the group names, and the first of their
        records' reads, sent now (``RECORDS_AHEAD`` in all), before any transaction's answer is waited for."""
        out: dict[int, tuple[list[str], dict[str, Any]]] = {}
        budget = RECORDS_AHEAD
        for shard, claim in claims.items():
            try:
                if claim.before is not None and self._call(claim.before) is not None:
                    continue  # a leader node was there: a win now would not vouch for this listing
                names = list(self._call(claim.listing))
            except NoNodeError:
                names = []  # no group was ever written there
            except Exception:
                log.debug("shard %d: the listing read with its claim failed; the store lists it", shard, exc_info=True)
                continue
            groups = f"{self.shard_path(shard)}/groups"
            heads = {name: self._client.get_async(f"{groups}/{name}") for name in names[:max(0, budget)]}
            budget -= len(heads)
            out[shard] = (names, heads)
        return out

    def listing(self, shard: int, epoch: int) -> Listing | None:
        """The groups read with our win of ``shard`` at ``epoch``, once (None: not read then, any thread):
        as of the win in ZooKeeper's order (see the module), so they hold every group an earlier
        leader's acknowledged write left there, as the store's own reads would."""
        taken = self._listings.pop(shard, None)
        return taken if taken is not None and taken.epoch == epoch else None

    def _commit_win(self, shard: int, address: str, version: int, leader_version: int | None) -> Any:
        """The win's transaction with the epoch node at ``version``, sent (its async result)."""
        epoch, base = version + 1, self.shard_path(shard)
        payload = json.dumps({"address": address, "epoch": epoch, "host": socket.gethostname(),
                              "pid": os.getpid()}).encode()
        tx = self._client.transaction()
        if leader_version is None:
            tx.create(f"{base}/leader", payload, ephemeral=True)
        else:
            tx.set_data(f"{base}/leader", payload, version=leader_version)
        tx.set_data(f"{base}/epoch", json.dumps({"epoch": epoch, "address": address}).encode(), version=version)
        return tx.commit_async()
