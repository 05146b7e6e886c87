"""Active/standby election of coordinators on one ephemeral znode (Pulsar's LeaderElectionImpl scheme).

Layout under ``root`` (e.g. ``/groupcoord/<cluster>/election``)::

    root/leader   ephemeral, data {"address": ...}: exists while the active's ZooKeeper session lives
    root/epoch    persistent, data {"epoch": n, "address": ...}: its znode *version* is the epoch

Why one plain ephemeral node and not the sequential-node queue of kazoo's ``Election``/``Lock``: we
have a handful of coordinators, so the herd effect of all watching one node is nothing, and the
node's content *is* the answer to "who is active" that standbys hand out in ``NOT_COORDINATOR``;
a queue would add ordering we do not need and a second place to look for the leader.

Winning is one transaction: create ``leader`` and ``set_data(epoch, version=v)``, so every new
active bumps the epoch (v + 1) atomically with taking the node. The epoch is the fencing token:
``ZooKeeperStore`` adds ``check(epoch, version=epoch)`` and ``check(leader, version=...)`` to every
write, so once anybody else has won, or our session has gone, our writes fail in ZooKeeper itself.

Session states and pauses (``coordinator.ha.zk_session``, shared with the shard elections): on
SUSPENDED, LOST or a process pause longer than ``max_pause`` the active stops at once (``on_lost``
fires, ``is_leader()`` is false, ``fence()`` raises) even though the session may still be alive, and
until it has looked again nobody is named active. On reconnection with the same session, if the
leader node is still ours we win *again* with a new epoch (so the coordinator reloads from the
store, as after any election); otherwise we follow. A restarted coordinator whose previous
incarnation's node still exists waits for that session to expire rather than deleting it.

Threads: ZooKeeper calls run on one election thread; ``on_elected(epoch)``/``on_lost()`` run in
order on one callback thread (never on kazoo's threads), and an exception in them is logged.
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
from dataclasses import dataclass

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry

from groupcoord.coordinator.ha.zk_polling import PollingHandler
from groupcoord.coordinator.ha.zk_security import ZkSecurity
from groupcoord.coordinator.ha.zk_session import SessionTerms
from groupcoord.coordinator.storage.store import FencedError

__all__ = ["Fence", "LeaderElection", "connect", "resign"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fence:
    """What a write must check in its ZooKeeper transaction to be sure this active still holds office."""

    epoch: int
    epoch_path: str
    leader_path: str
    leader_version: int

    def apply(self, tx: TransactionRequest) -> None:
        """Add the two checks (ops 0 and 1 of the transaction)."""
        tx.check(self.epoch_path, self.epoch)
        tx.check(self.leader_path, self.leader_version)


def connect(
    hosts: str,
    *,
    session_timeout: float = 10.0,
    connect_timeout: float = 15.0,
    max_reconnect_delay: float = 1.0,
    security: ZkSecurity | None = None,
) -> KazooClient:
    """A started kazoo client (``hosts`` is ``host:port[,host:port...][/chroot]``); the caller stops it.

    kazoo's default reconnection backoff grows to an hour; ours stops at ``max_reconnect_delay`` so a
    coordinator is back within a second of ZooKeeper returning (and, if quick, keeps its session). Its
    connection waits on its socket with one ``poll`` each (``coordinator.ha.zk_polling``).
    """
    retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=max_reconnect_delay)
    extra = security.kazoo_kwargs() if security is not None else {}  # TLS, credentials, znode ACLs
    client = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry=retry, handler=PollingHandler(), **extra)
    client.start(timeout=connect_timeout)
    return client


class LeaderElection(SessionTerms):
    """Take part in the election of the active coordinator; know who the active is."""

    def __init__(
        self,
        client: KazooClient,
        root: str,
        address: str,
        *,
        on_elected: Callable[[int], None] | None = None,
        on_lost: Callable[[], None] | None = None,
        op_timeout: float = 10.0,
        retry_delay: float = 1.0,
        session_timeout: float | None = None,
        pause_tick: float = 0.1,
        max_pause: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``address`` is what standbys tell workers (``--advertise``); ``op_timeout`` bounds each ZooKeeper
        call; ``retry_delay`` is the pause before retrying after an unexpected error. A pause over
        ``max_pause`` (default: half of ``session_timeout``, itself by default the timeout the kazoo
        client asks for) ends our term as SUSPENDED would (``coordinator.ha.zk_session`` says why half).
        If ZooKeeper negotiated a *shorter* timeout than we asked for (over its ``maxSessionTimeout``),
        pass the real one."""
        super().__init__(client, address, op_timeout=op_timeout, session_timeout=session_timeout,
                         pause_tick=pause_tick, max_pause=max_pause, monotonic=monotonic)
        self.root = root.rstrip("/")
        self.leader_path = f"{self.root}/leader"
        self.epoch_path = f"{self.root}/epoch"
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._retry_delay = retry_delay
        self._payload = json.dumps({"address": address, "host": socket.gethostname(), "pid": os.getpid()}).encode()
        self._fence: Fence | None = None  # set while we are the active
        self._leader_address: str | None = None
        self._callbacks: queue.SimpleQueue[tuple[str, int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._callback_thread: threading.Thread | None = None

    # -- public API -------------------------------------------------------------------------------

    def start(self, address: str | None = None) -> None:
        """Join the election (returns at once; ``on_elected`` fires when we win). ``address``, if
        given, replaces the advertised one (known only once the server has bound its port)."""
        if self._thread is not None:
            raise RuntimeError("election already started")
        if address is not None:
            self.address = address
            self._payload = json.dumps({"address": address, "host": socket.gethostname(), "pid": os.getpid()}).encode()
        self._callback_thread = threading.Thread(target=self._run_callbacks, name="election-callbacks", daemon=True)
        self._callback_thread.start()
        self._start_session()
        self._thread = threading.Thread(target=self._run, name="election", daemon=True)
        self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """Leave the election: stop acting (``on_lost`` if active), then delete our leader node."""
        if self._thread is None:
            return
        self._stopping.set()
        self._wake.set()
        self._thread.join(self._op_timeout)
        self._stop_session()
        with self._lock:
            fence, self._fence = self._fence, None
            self._leader_address = None
        if fence is not None:
            self._callbacks.put(("lost", 0))
            self._resign(fence)
        self._callbacks.put(None)
        if self._callback_thread is not None:
            self._callback_thread.join(self._op_timeout)
        self._thread = None

    def is_leader(self) -> bool:
        with self._lock:
            self._pause_detected()
            return self._fence is not None

    @property
    def epoch(self) -> int | None:
        """Our epoch while active, else None."""
        with self._lock:
            self._pause_detected()
            return self._fence.epoch if self._fence else None

    def current_leader(self) -> str | None:
        """The active coordinator's advertised address, if known (ours when we are active)."""
        with self._lock:
            self._pause_detected()
            if self._fence is not None:
                return self.address
            if self._leader_address == self.address or not self._view_current:
                # a previous incarnation of us, our own term ended by a pause or a disconnect, or a
                # leader seen before we were cut off from ZooKeeper (it may have died meanwhile)
                return None
            return self._leader_address

    def fence(self) -> Fence:
        """The checks a write must carry; raises ``FencedError`` unless we are the active."""
        with self._lock:
            self._pause_detected()
            if self._fence is None:
                raise FencedError(f"{self.address} is not the active coordinator (leader: {self._leader_address})")
            return self._fence

    def recheck(self) -> None:
        """Ask the election thread to look at ZooKeeper again (e.g. after a write was fenced)."""
        self._wake.set()

    def _on_node_event(self, event: WatchedEvent) -> None:
        self._wake.set()

    # -- the session's hooks (coordinator.ha.zk_session) ----------------------------------------

    def _end_terms_locked(self) -> str:
        """End our term (if any); the callback is queued under the lock so it cannot overtake a later
        "elected"."""
        was_leader, self._fence = self._fence is not None, None
        if was_leader:
            self._callbacks.put(("lost", 0))
            return "stops acting as the active coordinator"
        return ""

    def _forget_locked(self) -> None:
        self._leader_address = None

    # -- the election thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set():
                return
            if not self._client.connected:
                continue  # the CONNECTED state change wakes us
            try:
                self._attempt()
            except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as exc:
                # kazoo moves to SUSPENDED/LOST and then CONNECTED, whose state change wakes us
                log.info("election attempt interrupted by the ZooKeeper connection: %r", exc)
            except Exception:
                log.exception("election attempt failed; retrying in %.1fs", self._retry_delay)
                if self._stopping.wait(self._retry_delay):
                    return
                self._wake.set()

    def _attempt(self) -> None:
        """Look at the leader node; take it if free, re-take it if still ours, else follow it."""
        c = self._client
        with self._lock:
            disconnects = self._disconnects
        c.ensure_path(self.root)
        try:
            self._call(c.create_async(self.epoch_path, b""))
        except NodeExistsError:
            pass
        while not self._stopping.is_set():
            session = c.client_id[0] if c.client_id else None
            stat = self._call(c.exists_async(self.leader_path, watch=self._on_node_event))
            _, epoch_stat = self._call(c.get_async(self.epoch_path))
            epoch = epoch_stat.version + 1
            tx = c.transaction()
            if stat is None or stat.owner_session_id != session:
                self._follow(None)  # not ours (any more): stop acting before anything else
            if stat is None:  # free: take it
                tx.create(self.leader_path, self._payload, ephemeral=True)
                leader_version = 0
            elif stat.owner_session_id == session and session is not None:
                if self.is_leader():
                    return  # nothing changed for us
                tx.check(self.leader_path, stat.version)  # still ours after a reconnect: win again
                leader_version = stat.version
            else:
                try:
                    data, _ = self._call(c.get_async(self.leader_path, watch=self._on_node_event))
                except NoNodeError:
                    continue
                self._follow(_address_of(data))
                return
            tx.set_data(self.epoch_path, json.dumps({"epoch": epoch, "address": self.address}).encode(),
                        version=epoch_stat.version)
            results = self._call(tx.commit_async())
            if any(isinstance(r, Exception) for r in results):
                continue  # somebody else moved first: look again
            self._win(Fence(epoch, self.epoch_path, self.leader_path, leader_version), disconnects)
            return

    def _win(self, fence: Fence, disconnects: int) -> None:
        if self._stopping.is_set():
            self._resign(fence)
            return
        with self._lock:
            self._pause_detected()
            if self._disconnects != disconnects:
                # the connection wavered (or we were paused) after we looked: we look again and win again
                return
            self._fence = fence
            self._leader_address = self.address
            self._view_current = True
            self._callbacks.put(("elected", fence.epoch))
        log.info("%s is the active coordinator (epoch %d)", self.address, fence.epoch)

    def _follow(self, leader: str | None) -> None:
        with self._lock:
            was_leader, self._fence = self._fence is not None, None
            self._leader_address = leader
            if leader is not None:
                self._view_current = True
            if was_leader:
                self._callbacks.put(("lost", 0))
        if was_leader:
            log.warning("%s lost the leader node to %s: stops acting as the active coordinator", self.address, leader)

    def _resign(self, fence: Fence) -> None:
        resign(self._client, fence, self._op_timeout)

    # -- the callback thread ----------------------------------------------------------------------

    def _run_callbacks(self) -> None:
        while (item := self._callbacks.get()) is not None:
            kind, epoch = item
            try:
                if kind == "elected" and self._on_elected is not None:
                    self._on_elected(epoch)
                elif kind == "lost" and self._on_lost is not None:
                    self._on_lost()
            except Exception:
                log.exception("election %s callback failed", kind)


def resign(client: KazooClient, fence: Fence, timeout: float) -> None:
    """Delete our leader node if it is still ours (best effort), so another takes over without
    waiting for our session."""
    try:
        tx = client.transaction()
        tx.check(fence.epoch_path, fence.epoch)
        tx.delete(fence.leader_path, version=fence.leader_version)
        tx.commit_async().get(timeout=timeout)
    except Exception:
        log.warning("could not delete %s; it goes with our session", fence.leader_path, exc_info=True)


def _address_of(data: bytes) -> str | None:
    try:
        address = json.loads(data)["address"]
    except (ValueError, KeyError, TypeError):
        return None
    return address if isinstance(address, str) else None
