"""A dead coordinator's shards on a real ZooKeeper, at the survivors' end (issue 37: led again within
1 s of ZooKeeper's expiry of its session): the survivor claims on the watch events alone, with no
read to wait for before its claim, and a shard the plan hands to a coordinator that is dead but not
expired yet (ten dying at once) goes to its second candidate instead of waiting for that expiry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from groupcoord.coordinator.ha.balance import plan
from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.shard_election import ShardElections
from tests.coordinator.ha.test_election import expire_session
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper]

SESSION_S = 4.0


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


class Calls:
    """The elections' kazoo client, logging in order each request sent ("read" or "claim") and each
    wait for an answer: requests sent before a wait share its round trip."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self.log: list[tuple[str, str]] = []

    def sent(self, kind: str, result: Any) -> Any:
        self.log.append(("send", kind))
        wait = result.get

        def get(*args: Any, **kwargs: Any) -> Any:
            self.log.append(("wait", kind))
            return wait(*args, **kwargs)

        result.get = get
        return result

    def get_async(self, path: str, watch: Any = None) -> Any:
        return self.sent("read", self._client.get_async(path, watch=watch))

    def get_children_async(self, path: str, watch: Any = None) -> Any:
        return self.sent("read", self._client.get_children_async(path, watch=watch))

    def exists_async(self, path: str, watch: Any = None) -> Any:
        return self.sent("read", self._client.exists_async(path, watch=watch))

    def transaction(self) -> Any:
        return Transaction(self, self._client.transaction())

    def __getattr__(self, name: str) -> Any:  # the session's listeners and the rest: the real client
        return getattr(self._client, name)


class Transaction:
    def __init__(self, calls: Calls, tx: Any) -> None:
        self._calls, self._tx = calls, tx

    def commit_async(self) -> Any:
        return self._calls.sent("claim", self._tx.commit_async())

    def __getattr__(self, name: str) -> Any:  # create, set_data, check: the real transaction's
        return getattr(self._tx, name)


@pytest.fixture
def cluster(zk: ZooKeeperServer) -> Iterator[Any]:
    root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
    made: list[tuple[ShardElections, KazooClient]] = []

    def make(address: str, shards: int, *, log: bool = False, **kwargs: Any) -> ShardElections:
        client = connect(zk.hosts, session_timeout=SESSION_S)
        elections = ShardElections(Calls(client) if log else client, root, address, shards,  # type: ignore[arg-type]
                                   session_timeout=SESSION_S, **kwargs)
        for office in elections.offices:  # no runtime here: a shard handed over is drained at once
            office.watch(lambda office=office: office.drained() if not office.in_office() else None)
        made.append((elections, client))
        elections.start()
        return elections

    yield make
    for elections, client in made:
        elections.stop()
        client.stop()
        client.close()


def counts(elections: list[ShardElections], shards: int) -> list[int]:
    return [sum(1 for s in range(shards) if e.leads(s)) for e in elections]


def quiet(calls: Calls, for_s: float = 1.0) -> Any:
    """A predicate: true once ``calls`` has logged nothing new for ``for_s`` seconds (polled)."""
    last = [-1, 0.0]

    def check() -> bool:
        now = time.monotonic()
        if len(calls.log) != last[0]:
            last[:] = [len(calls.log), now]
        return now - last[1] >= for_s

    return check


def freeze(elections: ShardElections) -> None:
    """Its election thread ends and nothing else: its session and nodes stay, as when its process has
    just been killed and ZooKeeper waits out the session (its kazoo client still pings)."""
    elections._stopping.set()
    elections._wake.set()
    elections._threads[1].join(10)


def kill(zk: ZooKeeperServer, elections: ShardElections) -> None:
    """A killed coordinator's session ends: frozen (it must not join again), then its session expired."""
    freeze(elections)
    expire_session(zk.hosts, elections._client)


def test_a_survivor_claims_a_dead_coordinators_shards_before_it_waits_for_any_read(
        zk: ZooKeeperServer, cluster: Any) -> None:
    """Before, a survivor read the members (and an ``exists`` per shard) and waited for them before
    claiming: a round trip on every failover's path. Now each member's node is watched, so its
    deletion names who left, and the claims go out first."""
    dead = cluster("a:1", 4)
    survivor = cluster("b:1", 4, log=True)
    wait_until(lambda: counts([dead, survivor], 4) == [2, 2], 30, "two shards each")
    calls = survivor._client
    assert isinstance(calls, Calls)
    wait_until(quiet(calls), 30, "the survivor idle")
    mark = len(calls.log)
    kill(zk, dead)  # ZooKeeper ends its session: its member and leader nodes go
    wait_until(lambda: counts([survivor], 4) == [4], 20, "the survivor leads every shard")
    after = calls.log[mark:]
    waits = [kind for what, kind in after if what == "wait"]
    assert waits[0] == "claim" and "read" not in waits[:waits.count("claim")], after  # no read waited for first


def test_a_shard_handed_to_a_dead_coordinator_not_expired_yet_goes_to_its_second_candidate(
        zk: ZooKeeperServer, cluster: Any) -> None:
    """"0dead:1" stops acting but its session lives on (a process killed a moment ago, ZooKeeper still
    waiting out its session). When "a:1" dies, the plan hands one of its shards to 0dead (the lowest
    count, first by address): after ``second_after`` the receiver of the plan without 0dead claims
    it too, long before ``overdue_after`` would let anyone."""
    options = {"second_after": 0.5, "overdue_after": 60.0}
    four = [cluster(name, 8, **options) for name in ("0dead:1", "a:1", "b:1", "c:1")]
    wait_until(lambda: counts(four, 8) == [2, 2, 2, 2], 60, "two shards each")
    frozen, dead, b, c = four
    freeze(frozen)
    lost = [s for s in range(8) if dead.leads(s)]
    leaders = {s: who[0] for s in range(8) if (who := b.leader(s)) is not None and s not in lost}
    assert plan("0dead:1", ["0dead:1", "b:1", "c:1"], leaders, 8).take == lost[:1]  # the scenario
    kill(zk, dead)
    wait_until(lambda: all(b.leads(s) or c.leads(s) for s in lost), 20, "a:1's shards led by b or c")
    assert counts([frozen, b, c], 8) == [2, 3, 3]  # even: 0dead still counts with its own two


def test_a_shard_the_plan_would_hand_back_to_its_last_leader_is_claimed_at_once_if_that_one_is_gone(
        zk: ZooKeeperServer, cluster: Any) -> None:
    """A session's end deletes its nodes in an order of ZooKeeper's own, and a survivor's kazoo thread
    takes their events one at a time: the member node's may come last. A coordinator gives up only
    shards over its target, so one whose freed shard the plan would hand straight back to it has
    likely lost it with its session: the survivor claims at once, on condition (in the transaction)
    that its member node is gone. Here the leader node alone is deleted and the member node kept:
    the claim goes out before any read and fails, changing nothing; once the session ends, it wins."""
    options = {"overdue_after": 60.0}
    frozen, survivor = cluster("a:1", 4, **options), cluster("b:1", 4, log=True, **options)
    wait_until(lambda: counts([frozen, survivor], 4) == [2, 2], 30, "two shards each")
    freeze(frozen)
    calls = survivor._client
    assert isinstance(calls, Calls)
    wait_until(quiet(calls), 30, "the survivor idle")
    lost, kept = [s for s in range(4) if frozen.leads(s)]
    epochs = [frozen.epoch(s) for s in (lost, kept)]
    other = connect(zk.hosts, session_timeout=SESSION_S)
    try:
        mark = len(calls.log)
        other.delete(f"{frozen.shard_path(lost)}/leader")
        wait_until(lambda: ("wait", "claim") in calls.log[mark:], 10, "the survivor's claim answered")
        after = calls.log[mark:]
        assert next(call for call in after if call[0] == "wait") == ("wait", "claim"), after
        assert not survivor.leads(lost)  # a:1's member node is there: the claim failed
        assert [other.exists(f"{frozen.shard_path(s)}/epoch").version for s in (lost, kept)] == epochs
        assert sorted(other.get_children(frozen.members_path)) == ["a%3A1", "b%3A1"]
        kill(zk, frozen)
        wait_until(lambda: counts([survivor], 4) == [4], 20, "the survivor leads every shard")
    finally:
        other.stop()
        other.close()
