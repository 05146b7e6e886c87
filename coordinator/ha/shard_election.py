"""Per-shard leader elections in ZooKeeper: which coordinator leads which shard, and its epoch.

Layout under ``root`` (``--zk-root``, e.g. ``/groupcoord/<cluster>``)::

    root/cluster             persistent {"shards": n}: fixed by the first coordinator to start
    root/members/<address>   ephemeral: one per live coordinator (its advertised address, quoted)
    root/shards/<s>/leader   ephemeral {"address": ..., "epoch": e}: the shard's leader while its session lives
    root/shards/<s>/epoch    persistent: its znode *version* is the shard's epoch
    root/shards/<s>/groups/  the shard's group records (``coordinator.ha.zk_store``)

Each shard is the election of ``coordinator.ha.election`` on its own two znodes: winning is one
transaction (create ``leader``, bump ``epoch`` by version), and every write of the shard's groups
carries ``check(epoch)`` and ``check(leader version)``, so a coordinator that lost the shard cannot
write it even before it notices. Not kazoo's ``SetPartitioner``: it releases every partition on any
membership change (kazoo issue #392); here a shard moves alone and the others keep serving.

**Reading by delta.** The view (live members, each shard's leader) is read whole at start and after
each reconnection or error (the server forgets a connection's watches); then only what a watch
event names (``coordinator.ha.shard_reads``): the ``members`` children or one shard's ``leader``.
A shard changing hands costs each coordinator one notification and one read, O(coordinators) in
all, not O(coordinators x shards) (issue 37). A free shard is re-planned every ``recheck_s`` from memory.
One departure named by its member node's event can be planned on at once, its members' read in
flight (``coordinator.ha.departures``: off by default, as measured; a burst always waits for the read).

Who takes what is ``coordinator.ha.balance.plan`` on that view. A hand-over is graceful: the shard
leaves office (the runtime unloads it: parked calls get NOT_COORDINATOR naming the receiver), its
writes in flight land (still fenced by our epoch), the runtime says ``drained`` (or
``handover_timeout`` passes), and only then is the leader node deleted, so the receiver's load sees
every write we acknowledged. Session states and pauses are ``coordinator.ha.zk_session``'s: every
shard dropped at once, no leader named until the view is read again, our leader nodes re-won with
new epochs on reconnection with the same session. Threads: ZooKeeper's, the callbacks', the pauses'.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from groupcoord.coordinator.ha.balance import plan
from groupcoord.coordinator.ha.departures import Departures
from groupcoord.coordinator.ha.election import Fence, resign
from groupcoord.coordinator.ha.shard_offices import Leader, ShardFencer, ShardOffice, ensure_cluster
from groupcoord.coordinator.ha.shard_queries import ShardQueries
from groupcoord.coordinator.ha.shard_reads import Reads, ViewReader, WinTimes
from groupcoord.coordinator.ha.zk_store import Listing

__all__ = ["ShardElections", "ShardFencer", "ShardOffice", "ensure_cluster"]

log = logging.getLogger("groupcoord.ha.shards")


class ShardElections(ShardQueries):
    """This process's part in every shard's election, and its view of the cluster (a ``ClusterView``)."""

    def __init__(
        self,
        client: KazooClient,
        root: str,
        address: str,
        shards: int,
        *,
        max_moves: int = 2,
        handover_timeout: float = 5.0,
        overdue_after: float | None = None,
        recheck_s: float = 1.0,
        op_timeout: float = 10.0,
        session_timeout: float | None = None,
        pause_tick: float = 0.1,
        max_pause: float | None = None,
        burst_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``overdue_after``: how long a shard may stay free before anyone takes it (default: the session
        timeout); ``max_pause``: ``coordinator.ha.zk_session``'s (default half the session timeout);
        ``burst_s``: departures this close are a burst, planned on only once read (``coordinator.ha.
        departures``; default the session timeout)."""
        super().__init__(client, address, op_timeout=op_timeout, session_timeout=session_timeout,
                         pause_tick=pause_tick, max_pause=max_pause, monotonic=monotonic)
        self.root = root.rstrip("/")
        self.shards = shards
        self._max_moves = max_moves
        self._handover_timeout = handover_timeout
        self._overdue_after = self._session_timeout if overdue_after is None else overdue_after
        self._recheck_s = recheck_s
        self._departures = Departures(self._session_timeout if burst_s is None else burst_s)
        self.members_path = f"{self.root}/members"
        self._fences: dict[int, Fence] = {}  # shards we lead (their fence), releasing ones included
        self._releasing: dict[int, str] = {}  # shard -> receiver, while handing over
        self._drained: dict[int, threading.Event] = {}
        self._leaders: dict[int, Leader] = {}  # our view: the shards that have a leader node
        self._members: list[str] = []
        self._free_since: dict[int, float] = {}
        self._full = True  # read the whole view on the next step (start, reconnection, error)
        self._dirty: set[int] = set()  # shards whose leader node a watch said changed
        self._members_dirty = False
        self._registered = False  # our member node is there, in our session
        self._callbacks: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # shard whose office changed
        self._threads: list[threading.Thread] = []
        self._reader = ViewReader(client, self.root, shards, op_timeout, on_leader=self._on_leader_event,
                                  on_members=self._on_members_event, monotonic=monotonic)
        self.offices = [ShardOffice(self, s) for s in range(shards)]

    @property
    def reads(self) -> int:  # ZooKeeper reads this process made for the elections (benchmarks, tests)
        return self._reader.reads

    @property
    def wins(self) -> dict[int, WinTimes]:
        """Per shard, when our last win of it was noticed, begun, read and won (benchmarks split failovers)."""
        return dict(self._reader.wins)

    def listing(self, shard: int) -> Listing | None:  # ``zk_store.Listed``, for ``ShardFencer``
        return self._reader.listing(shard, self.epoch(shard))

    def shard_path(self, shard: int) -> str:
        return f"{self.root}/shards/{shard}"

    def groups_path(self, shard: int) -> str:
        return f"{self.shard_path(shard)}/groups"

    def fencer(self, shard: int) -> ShardFencer:
        return ShardFencer(self, shard)

    # -- life ---------------------------------------------------------------------------------------

    def start(self, address: str | None = None) -> None:
        """Join (returns at once). ``address`` replaces the advertised one (known once the port is bound)."""
        if self._threads:
            raise RuntimeError("shard elections already started")
        if address is not None:
            self.address = address
        for name, target in (("shard-callbacks", self._run_callbacks), ("shard-election", self._run)):
            self._threads.append(threading.Thread(target=target, name=f"{name} {self.address}", daemon=True))
        self._start_session()
        for thread in self._threads:
            thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Leave: shards out of office, our leader and member nodes deleted (others take over at once)."""
        if not self._threads:
            return
        self._stopping.set()
        self._wake.set()
        self._threads[1].join(self._op_timeout)
        self._stop_session()
        with self._lock:
            fences, self._fences = dict(self._fences), {}
            self._releasing.clear()
        for shard, fence in fences.items():
            self._callbacks.put(shard)
            resign(self._client, fence, self._op_timeout)
        try:
            self._client.delete(self._reader.member_path(self.address))
        except Exception:
            log.debug("could not delete our member node", exc_info=True)
        self._callbacks.put(None)
        self._threads[0].join(self._op_timeout)
        self._threads = []

    # -- what the offices and stores tell (any thread; what they ask: ``ShardQueries``) ---------------

    def recheck(self, shard: int | None = None) -> None:
        """Read ``shard``'s leader node again (e.g. after one of its writes was fenced), or everything."""
        with self._lock:
            if shard is None:
                self._full = True
            else:
                self._dirty.add(shard)
        self._wake.set()

    def drained(self, shard: int) -> None:
        with self._lock:
            event = self._drained.get(shard)
        if event is not None:
            event.set()

    # -- watches and the session's hooks (kazoo's threads: no blocking) ------------------------------

    def _on_leader_event(self, event: WatchedEvent) -> None:
        try:
            shard = int(event.path.rsplit("/", 2)[-2])
        except (ValueError, IndexError, AttributeError):
            return
        with self._lock:
            self._dirty.add(shard)
        self._wake.set()

    def _on_members_event(self, event: WatchedEvent) -> None:
        with self._lock:
            self._members_dirty = True
        self._wake.set()

    def _end_terms_locked(self) -> str:
        dropped = sorted(self._fences)
        self._dirty.update(dropped)  # still ours? (reconnecting reads everything: ``_reconnected_locked``)
        self._fences.clear()
        self._releasing.clear()
        for event in self._drained.values():
            event.set()
        for shard in dropped:
            self._callbacks.put(shard)
        return f"stops leading shards {dropped}" if dropped else ""

    def _forget_locked(self) -> None:
        self._leaders.clear()
        self._registered = False

    def _reconnected_locked(self) -> None:
        self._full = True

    # -- the election thread ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            woken = self._wake.wait(self._recheck_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            if not self._client.connected:
                continue
            with self._lock:
                idle = not woken and not self._free_since and not self._full and not self._dirty
            if idle:  # nothing changed (watches wake us) and no shard is free: nothing to do
                continue
            try:
                self._step()
            except Exception as exc:  # read everything again on the next step
                self.recheck()
                if isinstance(exc, (ConnectionLoss, SessionExpiredError, ConnectionClosedError)):
                    log.info("shard election step interrupted by the ZooKeeper connection: %r", exc)
                else:
                    log.exception("shard election step failed; reading everything again")

    def _step(self) -> None:
        """Read what changed, update the view, act on our part of the plan."""
        self._reader.prepare()
        with self._lock:
            self._reader.begin()
            disconnects = self._disconnects
            full, self._full = self._full, False
            dirty = set(range(self.shards)) if full else self._dirty
            self._dirty = set()
            members_dirty, self._members_dirty = self._members_dirty or full, False
            held = set(self._fences)  # a deletion event may predate our own win of it: read those
        session = self._session_id()
        if full or not self._registered:
            self._registered = self._reader.register(self.address, session)
            if not self._registered:
                with self._lock:
                    self._full = True  # not one of the members yet: nothing to decide
                return
        if full:
            self._reader.forget_member_watches()
        reads, pending = self._reader.read_members_later(sorted(dirty), members=members_dirty, held=held)
        members, assumed = self._step_members(pending, reads, full)
        rewin = self._update_view(reads.found, members, session, disconnects, full)
        if rewin is None:
            return
        self._win(rewin, disconnects)  # ours after a reconnect or a pause: win again with a new epoch
        with self._lock:
            view = {s: leader.address for s, leader in self._leaders.items()}
            now = self._monotonic()
            overdue = [s for s, since in self._free_since.items() if now - since >= self._overdue_after]
            live = list(self._members)
        decided = plan(self.address, live, view, self.shards, overdue=overdue, max_moves=self._max_moves)
        self._win(dict.fromkeys(decided.take), disconnects)
        if assumed and members is not None:  # planned on a named departure: now the members as read
            self._take_members(self._reader.members_of(pending), members, disconnects)
        for shard in self._reader.settle(reads.unsettled):  # read as free, but its node was there again
            self.recheck(shard)
        if decided.release:
            self._hand_over(decided.release, decided.receivers)
            self._wake.set()

    def _step_members(self, pending: Any, reads: Reads, full: bool) -> tuple[list[str] | None, bool]:
        """The members this step plans on (None: unchanged), and whether assumed (their read in flight)."""
        assumed, departed = None, self._reader.take_departed()
        if pending is not None and not full:
            assumed, departed = self._members_before_read(pending, reads, departed)
        members = assumed if assumed is not None or pending is None else self._reader.members_of(pending)
        back = [d for d in departed if assumed is None and members is not None and d in members]
        self._reader.give_back(back)  # read before their node went: the next step's, planned on then
        self._departures.took([d for d in departed if d not in back], self._monotonic())
        return members, assumed is not None

    def _members_before_read(self, pending: Any, reads: Reads, departed: list[str]) -> tuple[list[str] | None, list[str]]:
        """The known members less one named departure, or None once the read has answered: a shard freed
        with no departure named yet waits for its member node's event or the read, whichever is first."""
        with self._lock:
            known = list(self._members)
            vacated = {leader.address for shard, found in reads.found.items()
                       if found is None and (leader := self._leaders.get(shard)) is not None} - {self.address}
        deadline = self._monotonic() + self._op_timeout
        while True:
            self._reader.news.clear()
            departed += self._reader.take_departed()
            now, last = self._monotonic(), self._reader.last_deletion
            assumed = self._departures.members_now(self.address, known, departed, vacated, now, last)
            if assumed is not None or pending.ready() or now >= deadline:
                return assumed, departed
            if now - last >= self._departures.quiet_s:  # not waiting for quiet: for the read
                log.debug("%s waits for the members' read to plan (departures named: %s)", self.address, departed)
            self._reader.news.wait(min(deadline - now, self._departures.quiet_s))

    def _take_members(self, read: list[str], assumed: list[str], disconnects: int) -> None:
        with self._lock:
            if self._disconnects == disconnects:
                self._members = read
        if read != assumed:  # a join, or another departure, meanwhile: plan again on what was read
            self._wake.set()

    def _update_view(self, found: dict[int, Leader | None], members: list[str] | None, session: int | None,
                     disconnects: int, full: bool) -> dict[int, int] | None:
        """Take in what was read; the shards to win again (-> our node's version), None if the connection wavered."""
        now = self._monotonic()
        rewin: dict[int, int] = {}
        with self._lock:
            if self._disconnects != disconnects:
                self._full = True
                self._wake.set()
                return None
            if members is not None:
                self._members = members
            for shard, leader in found.items():
                if leader is None:
                    self._leaders.pop(shard, None)
                    self._free_since.setdefault(shard, now)
                else:
                    self._leaders[shard] = leader
                    self._free_since.pop(shard, None)
                if shard in self._fences and (leader is None or leader.session != session):
                    self._fences.pop(shard)
                    self._releasing.pop(shard, None)
                    self._callbacks.put(shard)
                    log.warning("%s lost shard %d to %s", self.address, shard, leader.address if leader else "nobody")
                elif leader is not None and leader.session == session and shard not in self._fences:
                    rewin[shard] = leader.version
            self._view_current = True  # after a disconnect, the first step to get here read everything
        return rewin

    def _win(self, claims: Mapping[int, int | None], disconnects: int) -> None:
        """Take each shard (create its leader node) or re-take it (-> our node's version), in one pipeline."""
        for shard, fence in self._reader.win(claims, self.address):
            if fence is None:
                self.recheck(shard)  # somebody moved first: read the shard again
                continue
            if self._stopping.is_set():
                resign(self._client, fence, self._op_timeout)
                continue
            with self._lock:
                self._pause_detected()
                if self._disconnects != disconnects:
                    self._wake.set()
                    return
                self._fences[shard] = fence
                self._leaders[shard] = Leader(self.address, fence.epoch, self._session_id() or 0, fence.leader_version)
                self._free_since.pop(shard, None)
            self.offices[shard].changed()  # its runtime starts loading now, not behind other callbacks
            log.info("%s leads shard %d (epoch %d)", self.address, shard, fence.epoch,
                     extra={"event": "shard_elected", "shard": shard, "term": fence.epoch})

    def _hand_over(self, shards: list[int], receivers: dict[int, str]) -> None:
        """Out of office first, wait for the runtime to drain each shard, then delete its leader node."""
        events: dict[int, threading.Event] = {}
        with self._lock:
            for shard in shards:
                if shard in self._fences:
                    self._releasing[shard] = receivers.get(shard, "")
                    events[shard] = self._drained[shard] = threading.Event()
                    self._callbacks.put(shard)
        log.info("%s hands over shards %s", self.address, sorted(events),
                 extra={"event": "shard_handover", "shards": sorted(events)})
        deadline = self._monotonic() + self._handover_timeout
        for shard, event in events.items():
            if not event.wait(max(0.0, deadline - self._monotonic())):
                log.warning("shard %d: writes still in flight after %.1fs; handing it over anyway (they are fenced)",
                            shard, self._handover_timeout)
            with self._lock:
                self._drained.pop(shard, None)
                fence = self._fences.pop(shard, None) if shard in self._releasing else None
                self._releasing.pop(shard, None)
            if fence is not None:
                resign(self._client, fence, self._op_timeout)
                self._callbacks.put(shard)

    # -- the callback thread ------------------------------------------------------------------------

    def _run_callbacks(self) -> None:
        while (shard := self._callbacks.get()) is not None:
            self.offices[shard].changed()
