"""Where a worker's group requests go: FindCoordinator's answer, cached, and when to ask again.

The decisions of ``docs/sharding-protocol.md`` ("What a client does"), shared by both transports
(``worker.transport``, ``worker.aio_transport``), which only carry out the calls:

- before a group request, when nothing is cached (or the cache was dropped), ask FindCoordinator
  at the bootstrap addresses in turn (the next one on a transport error) and keep the answer
  (address, shard, epoch);
- NOT_COORDINATOR with a hint: go to the hint at once; if the hint fails too, or there was none,
  ask FindCoordinator again. A transport error, or COORDINATOR_NOT_AVAILABLE (the caller backs
  off first): ask again. COORDINATOR_LOAD_IN_PROGRESS: stay, the caller retries with backoff;
- an answer with a lower epoch for the shard than the one held is a stale view: the next
  bootstrap address is asked, and the stale answer used only if no address has a better one;
  so is "the shard has no leader" (COORDINATOR_NOT_AVAILABLE): a coordinator cut off from
  ZooKeeper says so of the shards it lost while the others name their new leader; only when no
  address names one is it the caller's error (back off, then ask again);
- a coordinator without FindCoordinator (UNIMPLEMENTED, an older version) turns the lookup off:
  the bootstrap list is walked in turn, following hints, as before FindCoordinator existed;
- a bootstrap address may reach a coordinator under another name (a proxy, a NAT, a port
  forward): when an answer names an address other than the one asked, the transport asks that
  bootstrap address who it is (DescribeCluster's ``self``) once, and an answer naming it is sent
  to the address dialled. So a worker behind a proxy stays behind it.
- a group the caller may not describe (GROUP_AUTHORIZATION_FAILED) is sent to the address asked:
  the request's own refusal says who was refused what;
- an answer whose host is a wildcard (``0.0.0.0``, ``::``: a coordinator that listens on every
  interface and advertises nothing else) is reached at the host of the bootstrap address asked;
- the bootstrap list is a starting point (Kafka's ``bootstrap.servers``): each round that finds the
  coordinator also asks the address that answered for the cluster's live coordinators (DescribeCluster),
  and the next rounds ask those too, after the bootstrap addresses. So a worker whose every bootstrap
  address died finds a coordinator it was never given;
- an answer naming an address that has not answered since it was named (a dead process, an address
  the worker cannot reach) is used only if no other address names a better one: the others are asked
  first, instead of following that address round after round.

The member id, generation and tasks are not this module's: nothing here resets them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from groupcoord import errors
from groupcoord.addresses import reachable_address
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["CoordinatorList", "Location", "Route"]

log = logging.getLogger("groupcoord.worker")

class CoordinatorList:
    """Which coordinator the next call goes to: the configured list, in turn, and hints (both transports)."""

    def __init__(self, addresses: Sequence[str], *, name: str = "worker") -> None:
        if not addresses:
            raise ValueError("at least one coordinator address is needed")
        self._addresses = tuple(addresses)
        self._name = name
        self._index = 0
        self.address = self._addresses[0]

    @property
    def addresses(self) -> tuple[str, ...]:
        return self._addresses

    def move(self, hint: str = "") -> bool:
        """Go to ``hint``, or to the address after the current one (wrapping around); True if it changed."""
        if hint:
            address = hint
        else:
            if self.address in self._addresses:  # reached through a hint: go on from there, not back to it
                self._index = self._addresses.index(self.address)
            self._index = (self._index + 1) % len(self._addresses)
            address = self._addresses[self._index]
        if address == self.address:
            return False
        log.info("%s: coordinator %s -> %s", self._name, self.address, address)
        self.address = address
        return True


@dataclass(frozen=True)
class Location:
    """One FindCoordinator answer: where the group's requests go, its shard and the leader's epoch."""

    address: str
    shard: int
    epoch: int


class Route:
    """The coordinator of one worker's group, as last found; what the transport does next.

    Used from one thread (or one event loop) at a time, like the transport that owns it."""

    def __init__(self, bootstrap: Sequence[str], *, name: str = "worker") -> None:
        self._list = CoordinatorList(bootstrap, name=name)
        self._name = name
        self.location: Location | None = None
        self.lookups = 0
        """FindCoordinator rounds asked (each asks one or more bootstrap addresses)."""
        self.enabled = True
        """False once a coordinator answered UNIMPLEMENTED: the bootstrap list is walked instead."""
        self._stale = True
        self._hinted = False
        self._first = ""  # the address a round asks first: the last one that answered
        self._learned: tuple[str, ...] = ()  # the cluster's live coordinators, from the last DescribeCluster
        self._learned_this_round = False
        self._unanswered: set[str] = set()  # addresses that failed on the transport since they were named
        self._aliases: dict[str, str] = {}  # a coordinator's advertised address -> the bootstrap address reaching it
        self._identified: set[str] = set()  # bootstrap addresses asked who they are
        self._stale_answer: tuple[str, pb.CoordinatorLocation] | None = None
        # "no leader right now" from an address this round: its view, which the next address may beat
        self._no_leader: errors.GroupCoordError | None = None

    # ------------------------------------------------------------------ where the next call goes

    @property
    def address(self) -> str:
        return self._list.address

    def lookup_needed(self) -> bool:
        """Ask FindCoordinator before the next group request."""
        return self.enabled and self._stale

    @property
    def known(self) -> tuple[str, ...]:
        """Every address a round may ask: the bootstrap list, then the coordinators learned since."""
        bootstrap = self._list.addresses
        return bootstrap + tuple(a for a in self._learned if a not in bootstrap)

    def ask_order(self) -> list[str]:
        """The known addresses to ask, the last one that answered first. Starts a round."""
        self.lookups += 1
        self._stale_answer = None
        self._no_leader = None
        self._learned_this_round = False
        addresses = self.known
        first = addresses.index(self._first) if self._first in addresses else 0
        return [addresses[(first + i) % len(addresses)] for i in range(len(addresses))]

    def wants_cluster(self) -> bool:
        """Should the transport ask the address that answered for the cluster's coordinators (once a round)?"""
        return not self._learned_this_round

    def learn(self, asked: str, cluster: pb.DescribeClusterResponse) -> None:
        """``asked`` named the cluster's live coordinators: the next rounds may ask each of them."""
        self._learned_this_round = True
        found = tuple(dict.fromkeys(self._aliases.get(c.address) or reachable_address(c.address, asked)
                                    for c in cluster.coordinators if c.address))
        if found and found != self._learned:
            log.info("%s: the cluster's coordinators: %s", self._name, ", ".join(found))
            self._learned = found

    def wants_identity(self, asked: str, entry: pb.CoordinatorLocation) -> bool:
        """Should the transport ask ``asked`` who it is (DescribeCluster) before using ``entry``?"""
        return (entry.error.code == pb.NONE and reachable_address(entry.address, asked) != asked
                and asked not in self._identified)

    def identified(self, asked: str, advertised: str) -> None:
        """``asked`` answered DescribeCluster as ``advertised`` ("" if it could not say)."""
        self._identified.add(asked)
        if advertised and advertised != asked:
            self._aliases.setdefault(advertised, asked)

    def answered(self, asked: str, entry: pb.CoordinatorLocation) -> errors.GroupCoordError | bool:
        """One bootstrap address's answer: True (the location is set), False (a stale view: ask the next
        address), or the error to raise (COORDINATOR_NOT_AVAILABLE: back off, then ask again)."""
        failure = errors.error_for(entry.error)
        if isinstance(failure, errors.GroupAuthorizationFailedError):
            # not allowed to look the group up: send the request to the address asked, whose refusal
            # of the request itself names the principal and the operation (PERMISSION_DENIED)
            self._stale = False
            self._go(asked)
            return True
        if isinstance(failure, errors.CoordinatorNotAvailableError):
            # that process sees no leader for the shard; one cut off from ZooKeeper sees none for good,
            # while the others know the new one: ask them before backing off (Kafka's client asks
            # another broker too)
            self._no_leader = self._no_leader or failure
            return False
        if failure is not None:
            return failure
        held = self.location
        stale = held is not None and entry.shard == held.shard and 0 < entry.epoch < held.epoch
        if stale or self._address_of(asked, entry) in self._unanswered:
            if self._stale_answer is None:  # used only if no other address names a better one
                self._stale_answer = (asked, entry)
            return False
        self._use(asked, entry)
        return True

    def round_failed(self, failures: Sequence[str]) -> errors.GroupCoordError | None:
        """Every bootstrap address was asked without a usable answer: use a stale one if there was one
        (None), else the error to raise (a shard without a leader's, if one said so)."""
        if self._stale_answer is not None:
            asked, entry = self._stale_answer
            self._use(asked, entry)
            return None
        if self._no_leader is not None:
            return self._no_leader
        return errors.CoordinatorNotAvailableError(
            f"FindCoordinator: no coordinator answered ({', '.join(failures) or 'none asked'})")

    def lookup_unsupported(self, asked: str) -> None:
        """``asked`` has no FindCoordinator (an older coordinator): walk the bootstrap list from it."""
        log.info("%s: %s has no FindCoordinator (an older coordinator): using the address list as given",
                 self._name, asked)
        self.enabled = False
        if asked != self._list.address:
            self._list.move(asked)

    # ------------------------------------------------------------------ after a call

    def succeeded(self) -> None:
        """A group request was answered by its coordinator (any answer but a move)."""
        self._hinted = False
        self._unanswered.discard(self.address)

    def moved(self, failure: errors.CoordinatorMovedError | None, hint: str = "") -> bool:
        """A group request failed on the transport (``failure`` None) or answered a move; True when the
        next call goes to another address (the transport drops its channel)."""
        if isinstance(failure, errors.CoordinatorLoadInProgressError):
            return False  # the right coordinator, loading: retry here
        if failure is None:
            self._unanswered.add(self.address)
        if not self.enabled:
            return self._list.move(hint)
        if isinstance(failure, errors.NotCoordinatorError) and hint and not self._hinted:
            self._hinted = True
            self._stale = False
            return self._go(hint)
        self._hinted = False
        self._stale = True
        return False

    # ------------------------------------------------------------------ inside

    def _address_of(self, asked: str, entry: pb.CoordinatorLocation) -> str:
        return self._aliases.get(entry.address) or reachable_address(entry.address, asked)

    def _use(self, asked: str, entry: pb.CoordinatorLocation) -> None:
        address = self._address_of(asked, entry)
        self._first = asked
        self.location = Location(address, entry.shard, entry.epoch)
        self._stale = False
        self._hinted = False
        self._go(address)

    def _go(self, address: str) -> bool:
        return self._list.move(self._aliases.get(address, address))


