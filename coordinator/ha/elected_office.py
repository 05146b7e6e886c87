"""Active/standby coordinators elected through ZooKeeper: the office of an HA coordinator.

Every process serves gRPC all the time. ``ElectedOffice`` is the ``Office`` the runtime is
built with: in office while the election says this process leads (which also covers a
process paused past half its ZooKeeper session, see ``coordinator.ha.election``), one term per
win. On a win the runtime loads every group off the event loop (answering
COORDINATOR_LOAD_IN_PROGRESS meanwhile); members keep their generation and sessions, so
heartbeating workers carry on without a rebalance. A standby answers NOT_COORDINATOR with
the active's address, read from the election node. On losing (session suspended or expired,
a pause, a write refused by the fence) the runtime drops every group at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["ElectedOffice", "Election"]

log = logging.getLogger("groupcoord.ha")


class Election(Protocol):
    """What the office needs of ``coordinator.ha.election.LeaderElection``."""

    def is_leader(self) -> bool: ...

    def current_leader(self) -> str | None: ...

    def recheck(self) -> None: ...


class ElectedOffice:
    """Office held while the election says so; ``on_elected``/``on_lost`` are the election's callbacks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._election: Election | None = None
        self._term = 0
        self._elected = False
        self._watchers: list[Callable[[], object]] = []

    def bind(self, election: Election) -> None:
        """The election (built after the office: its callbacks name this object)."""
        self._election = election

    # election callbacks (the election's thread)
    def on_elected(self, epoch: int) -> None:
        with self._lock:
            self._term = epoch
            self._elected = True
        log.info("elected (epoch %d): loading groups", epoch, extra={"event": "elected", "term": epoch})
        self._notify()

    def on_lost(self) -> None:
        with self._lock:
            was, self._elected = self._elected, False
        if was:
            log.warning("lost leadership: standing by", extra={"event": "lost_leadership"})
        self._notify()

    def _notify(self) -> None:
        for watcher in list(self._watchers):
            watcher()

    # the Office protocol (the runtime's thread)
    def in_office(self) -> bool:
        with self._lock:
            elected = self._elected
        return elected and self._election is not None and self._election.is_leader()

    def term(self) -> int:
        with self._lock:
            return self._term

    def active_address(self) -> str:
        return (self._election.current_leader() or "") if self._election is not None else ""

    def watch(self, on_change: Callable[[], object]) -> None:
        self._watchers.append(on_change)

    def stand_down(self) -> None:
        if self._election is not None:
            self._election.recheck()
