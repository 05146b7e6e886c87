"""A group's parts (per-member records) in ZooKeeper: child znodes written with the group's znode in one
fenced transaction, read back by the next active; a whole write moves the generation on (stale
children ignored, then swept); a change too large for one transaction asks for a whole write; a
consumer group run on the store reloads as it was."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.ha.election import LeaderElection, connect
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from groupcoord.coordinator.storage.store import FencedError, WholeWriteNeeded
from groupcoord.coordinator.testing import Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.model.consumer_sim import Fleet, G
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = [pytest.mark.zookeeper, pytest.mark.slow]


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def stores(zk: ZooKeeperServer) -> Iterator[tuple[ZooKeeperStore, ZooKeeperStore, LeaderElection]]:
    """An active's store, a standby's store of the same cluster, and the active's election."""
    root = f"/groupcoord/parts-{uuid.uuid4().hex[:8]}"
    made = []
    for port in (9301, 9302):
        client = connect(zk.hosts, session_timeout=6.0)
        election = LeaderElection(client, f"{root}/election", f"127.0.0.1:{port}", op_timeout=5.0, retry_delay=0.2)
        election.start()
        if port == 9301:
            wait_until(election.is_leader, 40, "the first coordinator to be active")
        made.append((client, election, ZooKeeperStore(client, f"{root}/groups", election, op_timeout=5.0)))
    yield made[0][2], made[1][2], made[0][1]
    for client, election, _ in made:
        election.stop()
        client.stop()
        client.close()


def test_parts_round_trip_and_a_whole_write_leaves_stale_children_out(
        stores: tuple[ZooKeeperStore, ZooKeeperStore, LeaderElection]) -> None:
    active, standby, _ = stores
    active.save_parts("g", {"generation": 1}, {"m:a": {"epoch": 1}, "m:b": {"epoch": 1}, "t:a": [["t1", 0]]})
    active.save_parts("g", None, {"m:a": {"epoch": 2}, "m:b": None, "m:never": None})
    assert standby.load_all() == {"g": {"generation": 1, "parts": {"m:a": {"epoch": 2}, "t:a": [["t1", 0]]}}}
    active.save("g", {"generation": 2, "parts": {"m:c": {"epoch": 3}, "m:d": {"epoch": 3}}})  # whole
    assert standby.load_all() == {"g": {"generation": 2, "parts": {"m:c": {"epoch": 3}, "m:d": {"epoch": 3}}}}
    active.save_parts("g", None, {"m:c": None, "m:e": {"epoch": 4}})  # c is in the whole write: a tombstone
    assert standby.load_all() == {"g": {"generation": 2, "parts": {"m:d": {"epoch": 3}, "m:e": {"epoch": 4}}}}
    names = active._client.get_children(active._path("g"))  # the stale children of the first generation swept
    assert "m%3Aa" not in names and "t%3Aa" not in names
    active.delete("g")
    assert standby.load_all() == {}


def test_too_large_a_change_asks_for_a_whole_write_and_a_standby_cannot_write(
        stores: tuple[ZooKeeperStore, ZooKeeperStore, LeaderElection]) -> None:
    active, standby, _ = stores
    small = ZooKeeperStore(active._client, active.root, active._election, op_timeout=5.0, max_bytes=2_000)
    small.load_all()
    with pytest.raises(WholeWriteNeeded, match="over one ZooKeeper transaction"):
        small.save_parts("big", {"generation": 1}, {f"m:{i}": {"x": uuid.uuid4().hex} for i in range(100)})
    standby.load_all()
    with pytest.raises(FencedError):
        standby.save_parts("g", {"generation": 1}, {"m:a": {"epoch": 1}})


def test_a_consumer_group_on_zookeeper_reloads_as_it_was(
        stores: tuple[ZooKeeperStore, ZooKeeperStore, LeaderElection]) -> None:
    active, standby, _ = stores
    h = Harness(CoordinatorConfig(), store=active)
    assert h.put_tasks(G, *(f"t{i}" for i in range(8))) == pb.NONE
    f = Fleet(h, ["a", "b", "c"])
    f.join("a", assignor="round-robin")
    f.join("b", assignor="sticky")  # a tie: the group keeps round-robin
    f.join("c")
    f.settle()
    f.leave("c")
    f.settle()
    group = h.model.consumer.groups[G]
    before = {i: (m.reconciled, m.metadata) for i, m in group.members.items()}
    again = Harness(CoordinatorConfig(), store=standby)
    again.runtime.begin_term(2, standby.load_all())
    back = again.model.consumer.groups[G]
    assert {i: (m.reconciled, m.metadata) for i, m in back.members.items()} == before
    assert back.target == group.target and back.target_epoch == group.target_epoch
    assert back.assignor == group.assignor == "round-robin" and back.named == {"round-robin": 1, "sticky": 1}
    assert {m.client_id: m.assignor for m in back.members.values()} == {"a": "round-robin", "b": "sticky"}
