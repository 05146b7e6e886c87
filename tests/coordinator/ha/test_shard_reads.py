"""The shard elections' reads and wins (``ViewReader``) on a real ZooKeeper: a failover makes no round
trip it does not need (issue 37: a dead coordinator's shards led again within its session + tick
+ 1 s), and a win that guessed the epoch still cannot win on a stale one."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.shard_reads import ViewReader
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def client(zk: ZooKeeperServer) -> Iterator[KazooClient]:
    made = connect(zk.hosts, session_timeout=10.0)
    yield made
    made.stop()
    made.close()


class Events:
    """The watch events a reader passes on, for a test to wait for."""

    def __init__(self) -> None:
        self.leader: list[WatchedEvent] = []
        self.arrived = threading.Event()

    def on_leader(self, event: WatchedEvent) -> None:
        self.leader.append(event)
        self.arrived.set()


def reader(client: KazooClient, events: Events, shards: int = 2) -> ViewReader:
    made = ViewReader(client, f"/groupcoord/test-{uuid.uuid4().hex[:8]}", shards, 10.0,
                      on_leader=events.on_leader, on_members=lambda event: None)
    made.prepare()
    return made


def test_a_claim_after_a_deletion_costs_one_exists_and_one_transaction(client: KazooClient) -> None:
    events = Events()
    view = reader(client, events)
    fence = view.win(0, "old:1", None)  # the first win knows no epoch: it reads the epoch node
    assert fence is not None and fence.epoch == 1
    view.begin()
    found, again = view.leaders([0])
    assert found[0] is not None and found[0].address == "old:1" and found[0].epoch == 1 and again == []
    client.delete(f"{view.shard_path(0)}/leader")  # its session ended
    assert events.arrived.wait(10), "no watch event for the deletion"
    reads = view.reads
    view.begin()
    found, again = view.leaders([0])
    assert found == {0: None} and again == []
    assert view.reads == reads + 1  # exists only: a get would have failed first
    fence = view.win(0, "new:1", None)
    assert fence is not None and fence.epoch == 2
    assert view.reads == reads + 1  # the epoch came from the leader node seen: no read of it
    data, stat = client.get(f"{view.shard_path(0)}/epoch")
    assert stat.version == 2 and json.loads(data) == {"epoch": 2, "address": "new:1"}
    times = view.wins[0]
    assert times.noticed <= times.began <= times.read <= times.won


def test_a_guessed_epoch_that_moved_on_is_read_and_the_win_fenced_by_it(client: KazooClient) -> None:
    view = reader(client, Events())
    assert view.win(1, "old:1", None) is not None
    view.begin()
    view.leaders([1])
    client.delete(f"{view.shard_path(1)}/leader")
    client.set(f"{view.shard_path(1)}/epoch", b"bumped behind our back")  # version 2: our guess of 1 is stale
    reads = view.reads
    fence = view.win(1, "new:1", None)
    assert fence is not None and fence.epoch == 3  # not 2: the stale guess failed and the epoch was read
    assert view.reads == reads + 1
    assert client.exists(f"{view.shard_path(1)}/epoch").version == 3
    assert json.loads(client.get(f"{view.shard_path(1)}/leader")[0])["epoch"] == 3


def test_a_shard_someone_else_took_is_not_won(client: KazooClient) -> None:
    view = reader(client, Events())
    client.create(f"{view.shard_path(0)}/leader", json.dumps({"address": "other:1", "epoch": 1}).encode(),
                  ephemeral=True)
    client.set(f"{view.shard_path(0)}/epoch", b"")
    assert view.win(0, "late:1", None) is None  # the create fails: nobody retries a shard that has a leader
    assert client.exists(f"{view.shard_path(0)}/epoch").version == 1  # and the epoch did not move
    view.begin()
    view.leaders([0])  # now the epoch is known (1): the guess is right, the create still fails
    assert view.win(0, "late:1", None) is None
    assert client.exists(f"{view.shard_path(0)}/epoch").version == 1
    assert 0 not in view.wins
