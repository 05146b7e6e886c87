"""Admission and terms: whether a runtime may answer for its groups now, and loading and unloading
them as its office's verdict changes.

The office (``coordinator.runtime.office``) says whether this process is in office and in which
term. A new term loads the groups from the store (off the event loop once attached; requests get
COORDINATOR_LOAD_IN_PROGRESS meanwhile); leaving office unloads them (parked and waiting requests
get NOT_COORDINATOR with the active's address). One job of the runtime (``coordinator.runtime.runtime``),
which says what serving and unloading groups mean (``TermHost``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from groupcoord.coordinator.clock import Clock
from groupcoord.coordinator.model.effects import error
from groupcoord.coordinator.runtime.office import Office, Standalone
from groupcoord.coordinator.storage.store import GroupRecord
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["TermHost", "Terms"]

log = logging.getLogger("groupcoord.runtime")


class TermHost(Protocol):
    """What a term's start and end do to the runtime's groups."""

    def serve(self, records: Mapping[str, GroupRecord]) -> int:
        """Serve ``records`` as the groups of a new term; returns how many groups there are."""
        ...

    def group_count(self) -> int:
        """How many groups are loaded now."""
        ...

    def drop_groups(self, hint: str) -> None:
        """Forget every group; whoever waits gets NOT_COORDINATOR with ``hint``, the active's address."""
        ...


class Terms:
    """One runtime's office, its current term and its loading."""

    def __init__(self, office: Office | None, host: TermHost, load_all: Callable[[], dict[str, GroupRecord]],
                 *, on_election: Callable[[], object], label: str = "") -> None:
        self.office: Office = office or Standalone()
        self._host = host
        self._load_all = load_all
        self._on_election = on_election
        self._label = label
        # the office term whose groups are loaded; None = none (standby, or between terms)
        self.current: int | None = 0 if office is None else None
        self.loading = False
        self._loading_term: int | None = None
        self._start_load: Callable[[int], object] = self.load
        self.last_load_s: float | None = None  # how long the last load of a term took (metrics)

    def refusal(self) -> pb.Error | None:
        """Why this process cannot answer for groups now (None: it can). Asks the office first."""
        if not self.office.in_office():
            if self.current is not None or self.loading:
                log.warning("%sthe office says our term is over: this process stops acting as the coordinator",
                            self._label)
                self.unload()
            return error(pb.NOT_COORDINATOR, "this coordinator is not active for this group (a standby, or another "
                         "coordinator leads its shard)", self.office.active_address())
        term = self.office.term()
        if self.current != term and not self.loading:
            if self.current is not None:
                self.unload()
            self.loading = True
            self._start_load(term)
        if self.loading:
            return error(pb.COORDINATOR_LOAD_IN_PROGRESS, "loading groups, retry shortly")
        return None

    def load(self, term: int | None = None) -> int:
        """Resume every stored group now (standalone start-up); returns how many."""
        records = self._load_all()
        return self.begin_term(self.office.term() if term is None else term, records)

    def begin_term(self, term: int, records: Mapping[str, GroupRecord]) -> int:
        """Serve ``records`` as this term's groups (after loading them, maybe off the loop)."""
        self.unload()
        self.current = term
        self.loading = False
        if not isinstance(self.office, Standalone):
            self._on_election()
        return self._host.serve(records)

    def load_failed(self, failure: BaseException) -> None:
        log.error("%sloading groups failed (%s): standing down", self._label, failure)
        self.unload()
        self.office.stand_down()

    def unload(self) -> None:
        """Stop answering for every group: parked and waiting requests get NOT_COORDINATOR."""
        if self.current is not None:
            groups = self._host.group_count()
            log.info("%sout of office (term %d): %d group(s) unloaded", self._label, self.current, groups,
                     extra={"event": "unloaded", "term": self.current, "groups": groups})
        self.current = None
        self.loading = False
        self._host.drop_groups(self.office.active_address())

    def attach(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        """Load each new term off ``loop``, and look at the office's changes there at once."""
        self._start_load = lambda term: self._load_off_loop(loop, clock, term)
        self.office.watch(lambda: loop.call_soon_threadsafe(self.refusal))

    def _load_off_loop(self, loop: asyncio.AbstractEventLoop, clock: Clock, term: int) -> None:
        self._loading_term = term
        started = clock.now()

        def loaded(future: asyncio.Future[dict[str, GroupRecord]]) -> None:
            if not self.loading or self._loading_term != term:
                return  # the office changed its mind meanwhile
            failure = future.exception()
            if failure is not None:
                self.load_failed(failure)
                return
            groups = self.begin_term(term, future.result())
            self.last_load_s = clock.now() - started
            log.info("%sin office (term %d): %d group(s) loaded in %.3fs", self._label, term, groups,
                     self.last_load_s, extra={"event": "in_office", "term": term, "groups": groups})

        loop.run_in_executor(None, self._load_all).add_done_callback(loaded)
