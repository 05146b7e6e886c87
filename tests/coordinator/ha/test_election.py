"""LeaderElection against a real ZooKeeper: one active, failover on stop and on session expiry, ZK restart,
process pauses (on a fake monotonic clock)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from groupcoord.coordinator.ha.election import LeaderElection, connect
from groupcoord.coordinator.storage.store import FencedError
from tests.zookeeper_server import ZooKeeperServer, expire_session, wait_until

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]

SESSION_TIMEOUT = 6.0
#: generous (CI hosts are shared): a failover takes up to one session timeout plus reconnection
FAILOVER_DEADLINE = SESSION_TIMEOUT * 3 + 20


class Candidate:
    """One coordinator's view: its kazoo client, its election and the callbacks it received, in order."""

    def __init__(self, hosts: str, root: str, address: str, *, on_elected: Callable[[int], None] | None = None,
                 **election_args: Any):
        self.address = address
        self.events: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._extra = on_elected
        self.client: KazooClient = connect(hosts, session_timeout=SESSION_TIMEOUT)
        self.election = LeaderElection(self.client, root, address, on_elected=self._elected, on_lost=self._lost,
                                       op_timeout=5.0, retry_delay=0.2, **election_args)

    def _elected(self, epoch: int) -> None:
        with self._lock:
            self.events.append(("elected", epoch))
        if self._extra is not None:
            self._extra(epoch)

    def _lost(self) -> None:
        with self._lock:
            self.events.append(("lost", 0))

    def history(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self.events)

    def close(self) -> None:
        self.election.stop()
        self.client.stop()
        self.client.close()


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def cluster(zk: ZooKeeperServer) -> Iterator[Callable[..., list[Candidate]]]:
    """Start candidates under a fresh election root; all are closed at the end of the test."""
    root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}/election"
    made: list[Candidate] = []

    def make(n: int, **kwargs: object) -> list[Candidate]:
        new = [Candidate(zk.hosts, root, f"127.0.0.1:{9100 + len(made) + i}", **kwargs) for i in range(n)]  # type: ignore[arg-type]
        made.extend(new)
        for c in new:
            c.election.start()
        return new

    yield make
    for c in made:
        c.close()


def assert_well_formed(history: list[tuple[str, int]]) -> None:
    """Callbacks alternate elected/lost, starting with elected, and every election has a higher epoch."""
    kinds = [kind for kind, _ in history]
    assert kinds == ["elected", "lost"] * (len(kinds) // 2) + ["elected"] * (len(kinds) % 2), history
    epochs = [epoch for kind, epoch in history if kind == "elected"]
    assert epochs == sorted(set(epochs)), history


def leaders(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.election.is_leader()]


def one_leader(candidates: list[Candidate]) -> Candidate:
    wait_until(lambda: len(leaders(candidates)) == 1
               and all(c.election.current_leader() == leaders(candidates)[0].address for c in candidates),
               FAILOVER_DEADLINE, "exactly one active, known to all")
    return leaders(candidates)[0]


def test_one_active_among_three_known_to_all(cluster: Callable[..., list[Candidate]]) -> None:
    candidates = cluster(3)
    active = one_leader(candidates)
    wait_until(lambda: active.history()[:1] == [("elected", 1)], 15, "on_elected(1)")
    assert_well_formed(active.history())
    assert active.election.fence().epoch == active.election.epoch
    for c in candidates:
        if c is not active:
            assert c.history() == []
            assert c.election.epoch is None
            with pytest.raises(FencedError, match="not the active coordinator"):
                c.election.fence()


def test_stopping_the_active_elects_another_with_a_higher_epoch(cluster: Callable[..., list[Candidate]]) -> None:
    candidates = cluster(3)
    first = one_leader(candidates)
    first.election.stop()
    assert first.history()[0] == ("elected", 1)
    assert first.history()[-1] == ("lost", 0)
    assert_well_formed(first.history())
    rest = [c for c in candidates if c is not first]
    second = one_leader(rest)
    wait_until(lambda: second.history()[-1:] == [("elected", second.election.epoch)], 15, "on_elected on the new one")
    assert_well_formed(second.history())
    assert second.history()[0][1] > max(epoch for _, epoch in first.history())
    assert first.election.current_leader() is None  # stopped: it no longer knows


def test_session_expiry_of_the_active_fails_over(zk: ZooKeeperServer, cluster: Callable[..., list[Candidate]]) -> None:
    candidates = cluster(2)
    first = one_leader(candidates)
    (second,) = [c for c in candidates if c is not first]
    stale = first.election.fence()
    expire_session(zk.hosts, first.client)
    wait_until(lambda: ("lost", 0) in first.history(), FAILOVER_DEADLINE, "on_lost on the expired active")
    # Term 2 goes to whichever creates the node first: the standby, notified of its deletion, or the expired one,
    # back at once with a new session (the one-node election, Pulsar's, gives it no handicap: the standby nearly
    # always wins, and test_zk_store's expiry test has seen both).
    wait_until(lambda: any(("elected", 2) in c.history() for c in candidates), 15, "on_elected(2) on one of them")
    active = one_leader(candidates)
    assert active.history()[-1] == ("elected", 2) and active.election.fence().epoch == 2 > stale.epoch
    follower = second if active is first else first
    assert not follower.election.is_leader()
    with pytest.raises(FencedError):
        follower.election.fence()
    assert ("elected", 2) not in follower.history()  # one term, one leader
    for c in candidates:
        assert_well_formed(c.history())


def test_zookeeper_restart_suspends_then_one_active_again(zk: ZooKeeperServer,
                                                         cluster: Callable[..., list[Candidate]]) -> None:
    candidates = cluster(3)
    first = one_leader(candidates)
    zk.restart()
    wait_until(lambda: ("lost", 0) in first.history(), FAILOVER_DEADLINE, "on_lost on the active when ZK went away")
    again = one_leader(candidates)
    # Whoever is active now (the same one, re-winning with its session intact, or another) has a new epoch.
    wait_until(lambda: again.history()[-1:] == [("elected", again.election.epoch)], 15, "on_elected on the active")
    assert again.election.epoch is not None and again.election.epoch >= 2
    for c in candidates:
        assert_well_formed(c.history())


def test_a_failing_callback_does_not_break_the_election(cluster: Callable[..., list[Candidate]]) -> None:
    def boom(epoch: int) -> None:
        raise RuntimeError("listener bug")

    (only,) = cluster(1, on_elected=boom)
    wait_until(lambda: only.history()[:1] == [("elected", 1)], FAILOVER_DEADLINE, "the election to complete")
    assert only.election.is_leader()


class PausableClock:
    """A monotonic clock that stands still until a test makes it jump (a process pause without the wait)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds


def wait_for_new_term(candidate: Candidate, after: int) -> int:
    """Wait until ``candidate`` is active again with an epoch above ``after``; returns the epoch.
    (A win voided by a pause during its attempt still used up an epoch, so the next is not always after + 1.)"""
    def won() -> bool:
        last = candidate.history()[-1:]
        return bool(last) and last[0][0] == "elected" and last[0][1] > after and candidate.election.is_leader()

    wait_until(won, FAILOVER_DEADLINE, f"on_elected with an epoch above {after}")
    epoch = candidate.history()[-1][1]
    assert candidate.election.epoch == epoch
    return epoch


def test_a_pause_past_the_bound_ends_the_term_and_a_live_session_wins_a_new_epoch(
        cluster: Callable[..., list[Candidate]]) -> None:
    clock = PausableClock()
    # the detector's own tick never comes: each probe below is the first to look after the "pause"
    # (or the election thread is, if a watch woke it just then: it then ends the term the same way)
    (only,) = cluster(1, monotonic=clock, pause_tick=3600.0)
    election = only.election
    assert election.max_pause == SESSION_TIMEOUT / 2  # derived from the kazoo client's session timeout
    epoch = wait_for_new_term(only, 0)
    clock.pause(0.9 * election.max_pause)
    assert election.is_leader() and election.epoch == epoch  # a stall within the bound is no pause

    def not_leader() -> None:
        assert not election.is_leader()

    def fenced() -> None:
        with pytest.raises(FencedError, match="not the active coordinator"):
            election.fence()

    def not_ours() -> None:
        assert election.current_leader() != only.address

    for probe in (not_leader, fenced, not_ours):
        lost_before = only.history().count(("lost", 0))
        clock.pause(election.max_pause + 0.1)
        probe()
        wait_until(lambda lost=lost_before + 1: only.history().count(("lost", 0)) == lost, 15, "on_lost")
        # the session is alive and the leader node still ours: the election thread wins it again
        epoch = wait_for_new_term(only, epoch)
    assert_well_formed(only.history())
    assert only.history().count(("lost", 0)) == 3


def test_the_detector_thread_ends_the_term_when_nobody_asks(cluster: Callable[..., list[Candidate]]) -> None:
    clock = PausableClock()
    (only,) = cluster(1, monotonic=clock, pause_tick=0.02, max_pause=1.0)
    first = wait_for_new_term(only, 0)
    clock.pause(1.5)
    wait_until(lambda: ("lost", 0) in only.history(), FAILOVER_DEADLINE, "on_lost from the detector thread")
    wait_for_new_term(only, first)
    assert_well_formed(only.history())
