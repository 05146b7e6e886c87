"""What both elections share: one ZooKeeper session's state changes and the process's pauses end
every term at once, and until the view is read again nobody is named leader.

``LeaderElection`` (one active) and ``ShardElections`` (a leader per shard) each hold terms that
are only as good as the session behind them. SUSPENDED, LOST or a pause over ``max_pause`` (see
``coordinator.ha.pauses``) make ``_end_terms_locked`` drop them all under the lock, bump
``_disconnects`` (a win computed before is void) and mark the view of the others stale
(``_view_current``): while stale, the elections name no leader, since the one last seen may have
died meanwhile. Their election thread re-reads and sets it again. One thread ticks the pause
detector; kazoo's listener only takes the lock briefly and wakes the election thread.

Why half the session for ``max_pause``: kazoo pings when the connection has been idle for a third
of the session timeout T, so while we ran normally the server heard from us no earlier than about
T/3 before our last tick, and it cannot expire the session before T after that, i.e. while
``now - last_tick < 2T/3``. T/2 keeps a T/6 margin for network latency and the tick's own lateness.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState

from groupcoord.coordinator.ha.pauses import PauseDetector

__all__ = ["SessionTerms", "requested_session_timeout"]

log = logging.getLogger("groupcoord.ha")


def requested_session_timeout(client: KazooClient) -> float:
    """The session timeout (seconds) ``client`` asks ZooKeeper for (kazoo keeps it in milliseconds)."""
    return float(getattr(client, "_session_timeout", 10_000)) / 1000


class SessionTerms:
    """The session and pause handling of an election; subclasses say what a term is."""

    def __init__(
        self,
        client: KazooClient,
        address: str,
        *,
        op_timeout: float,
        session_timeout: float | None,
        pause_tick: float,
        max_pause: float | None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.address = address
        self._op_timeout = op_timeout
        session_timeout = session_timeout if session_timeout is not None else requested_session_timeout(client)
        self._session_timeout = session_timeout
        self._pause_tick = pause_tick
        self._pauses = PauseDetector(monotonic, session_timeout / 2 if max_pause is None else max_pause)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._disconnects = 0  # bumped whenever terms end at once: a win computed before is void
        self._view_current = False  # the others' leadership as read since the last disconnect or pause
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._pause_thread: threading.Thread | None = None

    @property
    def max_pause(self) -> float:
        """A pause longer than this (seconds) ends our terms."""
        return self._pauses.max_pause

    # -- what subclasses say --------------------------------------------------------------------------

    def _end_terms_locked(self) -> str:
        """Under ``_lock``: drop every term; what ended, for the log ("" when nothing did)."""
        raise NotImplementedError

    def _forget_locked(self) -> None:
        """Under ``_lock``: the session is gone (LOST); forget what it saw."""

    def _reconnected_locked(self) -> None:
        """Under ``_lock``: connected again (our watches are gone with the old connection)."""

    # -- life -----------------------------------------------------------------------------------------

    def _start_session(self) -> None:
        """Listen to the session and start ticking (the subclass starts its own threads)."""
        with self._lock:
            self._pauses.tick()
        self._pause_thread = threading.Thread(target=self._watch_pauses, name=f"{type(self).__name__}-pauses",
                                              daemon=True)
        self._pause_thread.start()
        self._client.add_listener(self._on_state)

    def _stop_session(self) -> None:
        """After ``_stopping`` is set: stop ticking and listening."""
        if self._pause_thread is not None:
            self._pause_thread.join(self._op_timeout)
            self._pause_thread = None
        self._client.remove_listener(self._on_state)

    def _call(self, async_result: Any) -> Any:
        return async_result.get(timeout=self._op_timeout)

    def _session_id(self) -> int | None:
        return self._client.client_id[0] if self._client.client_id else None

    # -- kazoo's listener (kazoo's thread: no blocking here) ------------------------------------------

    def _on_state(self, state: str) -> None:
        with self._lock:
            if state in (KazooState.SUSPENDED, KazooState.LOST):
                ended = self._end_all_locked()
                if state == KazooState.LOST:
                    self._forget_locked()
            else:
                ended = ""
                self._reconnected_locked()
        if ended:
            log.warning("ZooKeeper connection %s: %s %s", state, self.address, ended)
        self._wake.set()

    def _end_all_locked(self) -> str:
        self._disconnects += 1
        self._view_current = False
        return self._end_terms_locked()

    # -- pauses ---------------------------------------------------------------------------------------

    def _watch_pauses(self) -> None:
        """Tick every ``pause_tick`` seconds; a late tick is a pause (handled here if nobody asked first)."""
        while not self._stopping.wait(self._pause_tick):
            with self._lock:
                self._pause_detected()
                self._pauses.tick()

    def _pause_detected(self) -> bool:
        """Under ``_lock``: if the process stood still over ``max_pause`` since the last tick, our session
        may have expired and another may rule: end every term at once, as on SUSPENDED, and have the
        election thread look again (a live session whose leader nodes are still ours wins new epochs)."""
        gap = self._pauses.paused_for()
        if gap is None:
            return False
        ended = self._end_all_locked()
        self._wake.set()
        if ended:
            log.warning("process paused for %.1fs (over %.1fs: our ZooKeeper session may have expired): %s %s",
                        gap, self.max_pause, self.address, ended)
        else:
            log.info("process paused for %.1fs; re-checking the election", gap)
        return True
