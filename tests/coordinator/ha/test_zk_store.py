"""ZooKeeperStore against a real ZooKeeper: round trip, size limit, and fencing of a deposed active."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient

from groupcoord.coordinator.ha.election import Fence, LeaderElection, connect
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from groupcoord.coordinator.storage.store import FencedError, GroupStore, StoreError
from tests.zookeeper_server import ZooKeeperServer, expire_session, wait_until

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]

SESSION_TIMEOUT = 6.0
DEADLINE = SESSION_TIMEOUT * 3 + 20


@dataclass
class Coordinator:
    """The ZooKeeper half of one coordinator process: client, election and store."""

    client: KazooClient
    election: LeaderElection
    store: ZooKeeperStore

    def close(self) -> None:
        self.election.stop()
        self.store.close()
        self.client.stop()
        self.client.close()


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def cluster_root() -> str:
    return f"/groupcoord/test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def coordinators(zk: ZooKeeperServer, cluster_root: str) -> Iterator[list[Coordinator]]:
    """Two coordinators of one cluster; the first is active when the test starts."""
    made: list[Coordinator] = []
    for port in (9201, 9202):
        client = connect(zk.hosts, session_timeout=SESSION_TIMEOUT)
        election = LeaderElection(client, f"{cluster_root}/election", f"127.0.0.1:{port}", op_timeout=5.0,
                                  retry_delay=0.2)
        made.append(Coordinator(client, election, ZooKeeperStore(client, f"{cluster_root}/groups", election,
                                                                 op_timeout=5.0)))
        election.start()
        if port == 9201:
            wait_until(election.is_leader, DEADLINE, "the first coordinator to be active")
    wait_until(lambda: made[1].election.current_leader() == "127.0.0.1:9201", DEADLINE, "the standby to see it")
    yield made
    for c in made:
        c.close()


def _record(generation: int, members: int = 3) -> dict[str, object]:
    return {
        "generation": generation,
        "members": [{"member_id": f"m-{i}", "session_timeout_ms": 10_000} for i in range(members)],
        "assignment": {f"m-{i}": [[f"task-{i}", 0]] for i in range(members)},
    }


def test_round_trip_through_zookeeper(coordinators: list[Coordinator]) -> None:
    active, standby = coordinators
    store = active.store
    assert isinstance(store, GroupStore)
    assert store.load_all() == {}
    for group_id in ("orders", "a/b", "..", "grüße β", "g_x"):
        store.save(group_id, _record(1))
    store.save("orders", _record(2))
    store.delete("a/b")
    store.delete("never-stored")
    expected = {"orders": _record(2), "..": _record(1), "grüße β": _record(1), "g_x": _record(1)}
    assert store.load_all() == expected
    assert standby.store.load_all() == expected  # anyone may read


def test_a_typical_large_record_fits_compressed_and_a_huge_one_is_refused(coordinators: list[Coordinator]) -> None:
    store = coordinators[0].store
    big = _record(7, members=100) | {"tasks": [f"task-{i}:pool-a:weight-1" for i in range(1000)]}
    store.save("big", big)
    assert store.load_all()["big"] == big
    with pytest.raises(StoreError, match=r"over the 1,000,000-byte ZooKeeper znode limit"):
        store.save("huge", {"blob": os.urandom(900_000).hex()})  # incompressible
    assert "huge" not in store.load_all()


def test_a_standby_cannot_write(coordinators: list[Coordinator]) -> None:
    standby = coordinators[1]
    with pytest.raises(FencedError, match="not the active coordinator"):
        standby.store.save("g", _record(1))
    with pytest.raises(FencedError):
        standby.store.delete("g")


class _StaleElection:
    """An election that still believes in an old fence: a deposed active that has not noticed yet."""

    def __init__(self, fence: Fence) -> None:
        self._fence = fence
        self.rechecks = 0

    def fence(self) -> Fence:
        return self._fence

    def recheck(self) -> None:
        self.rechecks += 1


def test_session_expiry_fences_the_old_active_and_the_next_one_sees_its_records(
    zk: ZooKeeperServer, coordinators: list[Coordinator], cluster_root: str
) -> None:
    old = coordinators[0]
    old.store.save("orders", _record(5))
    stale_fence = old.election.fence()
    unaware = ZooKeeperStore(old.client, f"{cluster_root}/groups", _StaleElection(stale_fence))  # type: ignore[arg-type]

    expire_session(zk.hosts, old.client)

    # The next term goes to whichever contender creates the node first: the one-node election (Pulsar's) gives
    # the expired one, back at once with a new session, no handicap, so either may win (make test saw both).
    def next_term() -> Coordinator | None:
        leading = [c for c in coordinators if c.election.is_leader() and (c.election.epoch or 0) > stale_fence.epoch]
        return leading[0] if leading else None

    wait_until(next_term, DEADLINE, "a coordinator to lead a new term")
    successor = next_term()
    assert successor is not None
    (other,) = [c for c in coordinators if c is not successor]
    assert successor.store.load_all() == {"orders": _record(5)}
    with pytest.raises(FencedError):
        other.store.save("orders", _record(6))

    # Even a deposed active that missed every notification is refused by ZooKeeper itself.
    wait_until(lambda: old.client.connected, DEADLINE, "the old client to have a new session")
    with pytest.raises(FencedError, match="epoch moved on"):
        unaware.save("orders", _record(99))
    with pytest.raises(FencedError):
        unaware.delete("orders")
    successor.store.save("orders", _record(6))
    assert other.store.load_all() == {"orders": _record(6)}


def test_records_survive_a_zookeeper_restart(zk: ZooKeeperServer, coordinators: list[Coordinator]) -> None:
    coordinators[0].store.save("orders", _record(3))
    coordinators[0].store.save("billing", _record(4))
    zk.restart()
    wait_until(lambda: sum(c.election.is_leader() for c in coordinators) == 1, DEADLINE, "one active again")
    (active,) = [c for c in coordinators if c.election.is_leader()]
    assert active.store.load_all() == {"orders": _record(3), "billing": _record(4)}
    active.store.save("orders", _record(8))
    assert active.store.load_all()["orders"] == _record(8)
