"""Per-shard leader elections in ZooKeeper: which coordinator leads which shard, and its epoch.

Layout under ``root`` (``--zk-root``, e.g. ``/groupcoord/<cluster>``)::

    root/cluster             persistent {"shards": n}: fixed by the first coordinator to start
    root/members/<address>   ephemeral: one per live coordinator (its advertised address, quoted)
    root/shards/<s>/leader   ephemeral {"address": ..., "epoch": e}: the shard's leader while its session lives
    root/shards/<s>/epoch    persistent: its znode *version* is the shard's epoch
    root/shards/<s>/groups/  the shard's group records (``coordinator.ha.zk_store``)

Each shard is the election of ``coordinator.ha.election`` on its own two znodes: winning is one
transaction (create ``leader``, bump ``epoch`` by version), and every write of the shard's groups
carries ``check(epoch)`` and ``check(leader version)``, so a coordinator that lost the shard (its
session expired, it was paused, another took over) cannot write it even before it notices. Not
kazoo's ``SetPartitioner``: it releases every partition on any membership change and waits for the
membership to settle (kazoo issue #392); here a shard moves alone and the others keep serving.

Who takes what is decided by ``coordinator.ha.balance.plan`` on this process's view (members and
leaders, re-read on every watch event, and every ``recheck_s`` while a shard is free): free shards are claimed by the
coordinators under their target, and a coordinator over its target hands shards over a few at a
time. A hand-over is graceful: the shard leaves office (the runtime unloads it: parked calls get
NOT_COORDINATOR naming the receiver), its writes in flight land (still fenced by our epoch), the
runtime says ``drained`` (or ``handover_timeout`` passes), and only then is the leader node deleted,
so the receiver's load sees every write we acknowledged.

Session states, pauses and threads are as in ``coordinator.ha.election``: SUSPENDED, LOST or a pause
over ``max_pause`` drops every shard at once (out of office, fence gone); on reconnection with the
same session our leader nodes are re-won with new epochs (the runtime reloads those shards); one
thread talks to ZooKeeper, one runs the callbacks, one ticks the pause detector.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import WatchedEvent

from groupcoord.coordinator.ha.balance import plan
from groupcoord.coordinator.ha.election import Fence, _requested_session_timeout
from groupcoord.coordinator.ha.pauses import PauseDetector
from groupcoord.coordinator.storage.store import FencedError

__all__ = ["ShardElections", "ShardFencer", "ShardOffice", "ensure_cluster"]

log = logging.getLogger("groupcoord.ha.shards")


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


class ShardElections:
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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``overdue_after``: how long a shard may stay free before anyone takes it (default: the session
        timeout); ``max_pause``: see ``LeaderElection`` (default half the session timeout)."""
        self._client = client
        self.root = root.rstrip("/")
        self.address = address
        self.shards = shards
        self._max_moves = max_moves
        self._handover_timeout = handover_timeout
        session_timeout = session_timeout if session_timeout is not None else _requested_session_timeout(client)
        self._overdue_after = session_timeout if overdue_after is None else overdue_after
        self._recheck_s = recheck_s
        self._op_timeout = op_timeout
        self._pause_tick = pause_tick
        self._pauses = PauseDetector(monotonic, session_timeout / 2 if max_pause is None else max_pause)
        self._monotonic = monotonic
        self.members_path = f"{self.root}/members"

        self._lock = threading.Lock()
        self._fences: dict[int, Fence] = {}  # shards we lead (their fence), releasing ones included
        self._releasing: dict[int, str] = {}  # shard -> receiver, while handing over
        self._drained: dict[int, threading.Event] = {}
        self._leaders: dict[int, tuple[str, int]] = {}  # our view: shard -> (address, epoch)
        self._members: list[str] = []
        self._free_since: dict[int, float] = {}
        self._disconnects = 0
        # False from SUSPENDED or LOST until a round re-read the leaders: our view of them may be stale
        self._view_current = False
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._callbacks: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # shard whose office changed
        self._threads: list[threading.Thread] = []
        self._prepare_done = False
        self.offices = [ShardOffice(self, s) for s in range(shards)]

    @property
    def max_pause(self) -> float:
        """A pause longer than this (seconds) ends our terms."""
        return self._pauses.max_pause

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
        for name, target in (("shard-callbacks", self._run_callbacks), ("shard-pauses", self._watch_pauses),
                             ("shard-election", self._run)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
        with self._lock:
            self._pauses.tick()
        self._client.add_listener(self._on_state)
        for thread in self._threads:
            thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Leave: every shard out of office, leader nodes and our member node deleted (others take over
        at once instead of after our session)."""
        if not self._threads:
            return
        self._stopping.set()
        self._wake.set()
        for thread in self._threads[1:]:
            thread.join(self._op_timeout)
        self._client.remove_listener(self._on_state)
        with self._lock:
            fences, self._fences = dict(self._fences), {}
            self._releasing.clear()
        for shard, fence in fences.items():
            self._callbacks.put(shard)
            self._resign(fence)
        try:
            self._client.delete(self._member_path())
        except Exception:
            log.debug("could not delete our member node", exc_info=True)
        self._callbacks.put(None)
        self._threads[0].join(self._op_timeout)
        self._threads = []

    # -- what the offices, stores and FindCoordinator ask (any thread) ------------------------------

    def leads(self, shard: int) -> bool:
        with self._lock:
            self._pause_detected()
            return shard in self._fences and shard not in self._releasing

    def epoch(self, shard: int) -> int:
        with self._lock:
            fence = self._fences.get(shard)
            return fence.epoch if fence is not None else 0

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
            return leader[0] if leader is not None and leader[0] != self.address else ""

    def leader(self, shard: int) -> tuple[str, int] | None:
        """The shard's leader as we know it; None while we are cut off from ZooKeeper (SUSPENDED or LOST),
        since the leader we last saw may have died meanwhile and another been elected: a worker told
        "no leader" asks another coordinator, one told the dead address would keep dialling it."""
        with self._lock:
            self._pause_detected()
            fence = self._fences.get(shard)
            if fence is not None:
                return self.address, fence.epoch
            if not self._view_current:
                return None
            known = self._leaders.get(shard)
            return known if known is not None and known[0] != self.address else None

    def coordinators(self) -> list[str]:
        with self._lock:
            return sorted(set(self._members))

    def moves(self) -> dict[int, str]:
        with self._lock:
            return dict(self._releasing)

    def recheck(self) -> None:
        self._wake.set()

    def drained(self, shard: int) -> None:
        with self._lock:
            event = self._drained.get(shard)
        if event is not None:
            event.set()

    # -- kazoo callbacks (no blocking) --------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self._lock:
                self._view_current = False
                dropped = self._drop_all_locked()
                if state == KazooState.LOST:
                    self._leaders.clear()
            if dropped:
                log.warning("ZooKeeper connection %s: %s stops leading shards %s", state, self.address, dropped)
        self._wake.set()

    def _on_event(self, event: WatchedEvent) -> None:
        self._wake.set()

    # -- pauses -------------------------------------------------------------------------------------

    def _watch_pauses(self) -> None:
        while not self._stopping.wait(self._pause_tick):
            with self._lock:
                self._pause_detected()
                self._pauses.tick()

    def _pause_detected(self) -> bool:
        """Under ``_lock``: a pause over ``max_pause`` ends every shard's term (see ``LeaderElection``)."""
        gap = self._pauses.paused_for()
        if gap is None:
            return False
        dropped = self._drop_all_locked()
        self._wake.set()
        if dropped:
            log.warning("process paused for %.1fs (over %.1fs): %s stops leading shards %s", gap, self.max_pause,
                        self.address, dropped)
        return True

    def _drop_all_locked(self) -> list[int]:
        self._disconnects += 1
        dropped = sorted(self._fences)
        self._fences.clear()
        self._releasing.clear()
        for event in self._drained.values():
            event.set()
        for shard in dropped:
            self._callbacks.put(shard)
        return dropped

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
                idle = not woken and not self._free_since and self._prepare_done
            if idle:  # nothing changed (watches wake us) and no shard is free: no reads at steady state
                continue
            try:
                self._round()
            except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as exc:
                log.info("shard election round interrupted by the ZooKeeper connection: %r", exc)
            except Exception:
                log.exception("shard election round failed; retrying in %.1fs", self._recheck_s)

    def _call(self, async_result: Any) -> Any:
        return async_result.get(timeout=self._op_timeout)

    def _member_path(self) -> str:
        return f"{self.members_path}/{quote(self.address, safe='')}"

    def _prepare(self) -> None:
        """The persistent nodes, once: members/, and each shard's epoch node."""
        c = self._client
        c.ensure_path(self.members_path)
        pending = []
        for shard in range(self.shards):
            c.ensure_path(self.shard_path(shard))
            pending.append(c.create_async(f"{self.shard_path(shard)}/epoch", b""))
        for result in pending:
            try:
                self._call(result)
            except NodeExistsError:
                pass
        self._prepare_done = True

    def _round(self) -> None:
        c = self._client
        if not self._prepare_done:
            self._prepare()
        with self._lock:
            disconnects = self._disconnects
        session = c.client_id[0] if c.client_id else None
        member = self._member_path()
        stat = self._call(c.exists_async(member, watch=self._on_event))
        if stat is None:
            try:
                self._call(c.create_async(member, self.address.encode(), ephemeral=True))
            except NodeExistsError:
                return  # created meanwhile; its watch wakes us
        elif stat.owner_session_id != session:
            log.info("%s: a previous incarnation's member node is still there; waiting for its session to end",
                     self.address)
            return
        names = self._call(c.get_children_async(self.members_path, watch=self._on_event))
        members = sorted(unquote(n) for n in names)
        reads = [(s, c.get_async(f"{self.shard_path(s)}/leader", watch=self._on_event)) for s in range(self.shards)]
        owners: dict[int, tuple[str, int, int, int]] = {}  # shard -> (address, epoch, owner session, version)
        for shard, result in reads:
            try:
                data, node = self._call(result)
            except NoNodeError:
                continue
            address, epoch = _leader_of(data)
            owners[shard] = (address, epoch, node.ephemeralOwner, node.version)
        now = self._monotonic()
        rewin: list[int] = []
        with self._lock:
            if self._disconnects != disconnects:
                self._wake.set()
                return
            self._members = members
            self._leaders = {s: (a, e) for s, (a, e, _, _) in owners.items()}
            self._view_current = True
            for shard in list(self._fences):
                owner = owners.get(shard)
                if owner is None or owner[2] != session:
                    self._fences.pop(shard)
                    self._releasing.pop(shard, None)
                    self._callbacks.put(shard)
                    log.warning("%s lost shard %d to %s", self.address, shard, owner[0] if owner else "nobody")
            for shard, (_, _, owner_session, _) in owners.items():
                if owner_session == session and shard not in self._fences:
                    rewin.append(shard)
            for shard in range(self.shards):
                if shard in owners:
                    self._free_since.pop(shard, None)
                else:
                    self._free_since.setdefault(shard, now)
            overdue = [s for s, since in self._free_since.items() if now - since >= self._overdue_after]
            view = {s: a for s, (a, _) in self._leaders.items()}
        for shard in rewin:  # ours after a reconnect or a pause: win again with a new epoch
            _, _, _, version = owners[shard]
            self._win(shard, disconnects, leader_version=version)
        decided = plan(self.address, members, view, self.shards, overdue=overdue, max_moves=self._max_moves)
        for shard in decided.take:
            self._win(shard, disconnects, leader_version=None)
        if decided.release:
            self._hand_over(decided.release, decided.receivers)
            self._wake.set()

    def _win(self, shard: int, disconnects: int, *, leader_version: int | None) -> None:
        """Take ``shard`` (create its leader node) or re-take it (``leader_version``: ours already)."""
        c = self._client
        epoch_path, leader_path = f"{self.shard_path(shard)}/epoch", f"{self.shard_path(shard)}/leader"
        _, epoch_stat = self._call(c.get_async(epoch_path))
        epoch = epoch_stat.version + 1
        payload = json.dumps({"address": self.address, "epoch": epoch, "host": socket.gethostname(),
                              "pid": os.getpid()}).encode()
        tx = c.transaction()
        if leader_version is None:
            tx.create(leader_path, payload, ephemeral=True)
            new_version = 0
        else:
            tx.set_data(leader_path, payload, version=leader_version)
            new_version = leader_version + 1
        tx.set_data(epoch_path, json.dumps({"epoch": epoch, "address": self.address}).encode(),
                    version=epoch_stat.version)
        results = self._call(tx.commit_async())
        if any(isinstance(r, Exception) for r in results):
            self._wake.set()  # somebody moved first: look again
            return
        fence = Fence(epoch, epoch_path, leader_path, new_version)
        if self._stopping.is_set():
            self._resign(fence)
            return
        with self._lock:
            self._pause_detected()
            if self._disconnects != disconnects:
                self._wake.set()
                return
            self._fences[shard] = fence
            self._leaders[shard] = (self.address, epoch)
            self._callbacks.put(shard)
        log.info("%s leads shard %d (epoch %d)", self.address, shard, epoch,
                 extra={"event": "shard_elected", "shard": shard, "term": epoch})

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
                self._resign(fence)
                self._callbacks.put(shard)

    def _resign(self, fence: Fence) -> None:
        try:
            tx = self._client.transaction()
            tx.check(fence.epoch_path, fence.epoch)
            tx.delete(fence.leader_path, version=fence.leader_version)
            self._call(tx.commit_async())
        except Exception:
            log.warning("could not delete %s; it goes with our session", fence.leader_path, exc_info=True)

    # -- the callback thread ------------------------------------------------------------------------

    def _run_callbacks(self) -> None:
        while (shard := self._callbacks.get()) is not None:
            self.offices[shard].changed()


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
        self._elections.recheck()

    def drained(self) -> None:
        self._elections.drained(self.shard)

    def changed(self) -> None:
        for watcher in list(self._watchers):
            try:
                watcher()
            except Exception:
                log.exception("shard %d office watcher failed", self.shard)


class ShardFencer:
    """What ``ZooKeeperStore`` needs of an election, for one shard."""

    def __init__(self, elections: ShardElections, shard: int) -> None:
        self._elections = elections
        self._shard = shard

    def fence(self) -> Fence:
        return self._elections.fence(self._shard)

    def recheck(self) -> None:
        self._elections.recheck()


def _leader_of(data: bytes) -> tuple[str, int]:
    try:
        parsed = json.loads(data)
        return str(parsed["address"]), int(parsed.get("epoch", 0))
    except (ValueError, KeyError, TypeError):
        return "", 0
