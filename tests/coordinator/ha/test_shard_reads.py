"""The shard elections' reads and wins (``ViewReader``) on a real ZooKeeper: a failover makes no round
trip it does not need (issue 37: a dead coordinator's shards led again within its session + tick
+ 1 s), and a win that guessed the epoch still cannot win on a stale one."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from groupcoord.coordinator.ha.election import Fence, connect, resign
from groupcoord.coordinator.ha.shard_reads import ViewReader
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
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


def reader(client: KazooClient, events: Events, shards: int = 4) -> ViewReader:
    made = ViewReader(client, f"/groupcoord/test-{uuid.uuid4().hex[:8]}", shards, 10.0,
                      on_leader=events.on_leader, on_members=lambda event: None)
    made.prepare()
    return made


def test_a_claim_after_a_deletion_costs_the_members_one_exists_and_one_transaction(client: KazooClient) -> None:
    events = Events()
    view = reader(client, events)
    fence = dict(view.win({0: None}, "old:1"))[0]  # the first win knows no epoch: it reads the epoch node
    assert fence is not None and fence.epoch == 1
    view.begin()
    members, found, unsettled = view.read([0], members=True)
    assert members == [] and unsettled == []
    assert found[0] is not None and found[0].address == "old:1" and found[0].epoch == 1
    client.delete(f"{view.shard_path(0)}/leader")  # its session ended
    assert events.arrived.wait(10), "no watch event for the deletion"
    reads = view.reads
    view.begin()
    members, found, unsettled = view.read([0], members=False)
    assert members == [] and found == {0: None}  # the members too: its session may have ended with it
    assert view.reads == reads + 2  # the members and an exists, no get: a get would have failed first
    fence = dict(view.win({0: None}, "new:1"))[0]
    assert fence is not None and fence.epoch == 2
    assert view.reads == reads + 2  # the epoch came from the leader node seen: no read of it
    assert view.settle(unsettled) == []  # it was free when the watch was set
    data, stat = client.get(f"{view.shard_path(0)}/epoch")
    assert stat.version == 2 and json.loads(data) == {"epoch": 2, "address": "new:1"}
    times = view.wins[0]
    assert times.noticed <= times.began <= times.read <= times.won


def test_a_guessed_epoch_that_moved_on_is_read_and_the_win_fenced_by_it(client: KazooClient) -> None:
    view = reader(client, Events())
    assert dict(view.win({1: None}, "old:1"))[1] is not None
    view.begin()
    view.read([1], members=False)
    client.delete(f"{view.shard_path(1)}/leader")
    client.set(f"{view.shard_path(1)}/epoch", b"bumped behind our back")  # version 2: our guess of 1 is stale
    reads = view.reads
    fence = dict(view.win({1: None}, "new:1"))[1]
    assert fence is not None and fence.epoch == 3  # not 2: the stale guess failed and the epoch was read
    assert view.reads == reads + 1
    assert client.exists(f"{view.shard_path(1)}/epoch").version == 3
    assert json.loads(client.get(f"{view.shard_path(1)}/leader")[0])["epoch"] == 3


def test_a_shard_someone_else_took_is_not_won(client: KazooClient) -> None:
    view = reader(client, Events())
    client.create(f"{view.shard_path(0)}/leader", json.dumps({"address": "other:1", "epoch": 1}).encode(),
                  ephemeral=True)
    client.set(f"{view.shard_path(0)}/epoch", b"")
    assert dict(view.win({0: None}, "late:1"))[0] is None  # the create fails: nobody retries a shard that has a leader
    assert client.exists(f"{view.shard_path(0)}/epoch").version == 1  # and the epoch did not move
    view.begin()
    view.read([0], members=False)  # now the epoch is known (1): the guess is right, the create still fails
    assert dict(view.win({0: None}, "late:1"))[0] is None
    assert client.exists(f"{view.shard_path(0)}/epoch").version == 1
    assert 0 not in view.wins


def test_a_shard_read_as_free_but_taken_meanwhile_is_read_again(client: KazooClient) -> None:
    events = Events()
    view = reader(client, events)
    assert dict(view.win({0: None}, "old:1"))[0] is not None
    view.read([0], members=False)
    client.delete(f"{view.shard_path(0)}/leader")
    assert events.arrived.wait(10), "no watch event for the deletion"
    client.create(f"{view.shard_path(0)}/leader", json.dumps({"address": "fast:1", "epoch": 2}).encode(),
                  ephemeral=True)  # another coordinator took it before we looked
    _, found, unsettled = view.read([0], members=False)
    assert found == {0: None}  # the deletion said free: not waited for ...
    assert dict(view.win({0: None}, "slow:1"))[0] is None  # ... so a claim may go out, and fails on the node there
    assert view.settle(unsettled) == [0]  # and the step reads it again
    _, found, unsettled = view.read([0], members=False)
    assert found[0] is not None and found[0].address == "fast:1" and unsettled == []


def test_claims_of_several_shards_go_out_together_and_each_is_fenced(client: KazooClient) -> None:
    view = reader(client, Events())
    first = dict(view.win({0: None, 1: None, 2: None}, "old:1"))  # epochs unknown: read together, then won
    assert [f.epoch if f else None for f in first.values()] == [1, 1, 1]
    view.read([0, 1, 2], members=False)
    for shard in (0, 1, 2):
        client.delete(f"{view.shard_path(shard)}/leader")
    client.set(f"{view.shard_path(1)}/epoch", b"bumped")  # shard 1's guess is stale
    client.create(f"{view.shard_path(2)}/leader", b"{}", ephemeral=True)  # shard 2 taken meanwhile
    reads = view.reads
    won = dict(view.win({0: None, 1: None, 2: None}, "new:1"))
    assert won[0] is not None and won[0].epoch == 2
    assert won[1] is not None and won[1].epoch == 3  # read again after its guess failed
    assert won[2] is None
    assert view.reads == reads + 1  # only shard 1's epoch was read
    assert [client.exists(f"{view.shard_path(s)}/epoch").version for s in (0, 1, 2)] == [2, 3, 1]


def test_a_deletion_older_than_our_own_win_does_not_make_us_think_it_free(client: KazooClient) -> None:
    events = Events()
    view = reader(client, events)
    assert dict(view.win({0: None}, "old:1"))[0] is not None
    view.read([0], members=False)
    client.delete(f"{view.shard_path(0)}/leader")
    assert events.arrived.wait(10), "no watch event for the deletion"
    assert dict(view.win({0: None}, "me:1"))[0] is not None  # won before the step looked at the deletion
    _, found, unsettled = view.read([0], members=False, held={0})
    assert found[0] is not None and found[0].address == "me:1" and unsettled == []


def test_a_cold_start_claims_every_shard_a_pipeline_at_a_time(client: KazooClient) -> None:
    view = reader(client, Events(), shards=40)
    won = view.win(dict.fromkeys(range(40)), "first:1")
    first = [next(won) for _ in range(16)]  # the first pipeline's answers, before the rest is sent
    assert [shard for shard, fence in first] == list(range(16)) and all(fence for _, fence in first)
    assert client.exists(f"{view.shard_path(16)}/leader") is None
    rest = dict(won)
    assert sorted(rest) == list(range(16, 40)) and all(f is not None and f.epoch == 1 for f in rest.values())


def test_a_whole_view_is_read_a_bounded_pipeline_at_a_time(client: KazooClient) -> None:
    view = reader(client, Events(), shards=300)  # over READS_AT_ONCE (256): two pipelines
    assert all(fence for _, fence in view.win({0: None, 299: None}, "a:1"))
    reads = view.reads
    _, found, unsettled = view.read(range(300), members=False)
    assert sorted(s for s, leader in found.items() if leader is not None) == [0, 299] and len(found) == 300
    assert len(unsettled) == 298 and all(result.ready() for _, result in unsettled)  # waited for, each pipeline
    assert view.reads == reads + 300 + 298 and view.settle(unsettled) == []


def test_a_win_lists_its_groups_for_that_term_only(client: KazooClient) -> None:
    view = reader(client, Events())
    client.create(f"{view.shard_path(0)}/groups/g_a", b"", makepath=True)
    client.create(f"{view.shard_path(2)}/leader", json.dumps({"address": "other:1", "epoch": 1}).encode(),
                  ephemeral=True)
    won = dict(view.win({0: None, 1: None, 2: None, 3: None}, "me:1"))
    fences = {s: f for s, f in won.items() if f is not None}
    assert sorted(fences) == [0, 1, 3] and won[2] is None
    listed = view.listing(0, fences[0].epoch)  # read with the win, in its pipeline, and the record too
    assert listed is not None and listed.names == ["g_a"] and list(listed.heads) == ["g_a"]
    assert view.listing(0, fences[0].epoch) is None  # once: a later load lists for itself
    assert view.listing(1, fences[1].epoch) == (fences[1].epoch, [], {})  # no groups node: no groups
    assert view.listing(2, 1) is None  # a claim that failed read nothing for anyone
    assert view.listing(3, fences[3].epoch + 1) is None  # another term's load does not get this term's listing


def test_records_read_ahead_for_a_term_that_ended_unloaded_are_dropped_when_a_later_term_is_read(
        client: KazooClient) -> None:
    view = reader(client, Events())
    client.create(f"{view.shard_path(0)}/groups/g_a", b"record", makepath=True)
    fence = dict(view.win({0: None}, "me:1"))[0]  # won, and never loaded (the shard was lost first)
    assert fence is not None
    client.delete(f"{view.shard_path(0)}/leader")
    client.set(f"{view.shard_path(0)}/epoch", b"")  # another coordinator's term, epoch 2
    client.create(f"{view.shard_path(0)}/leader", json.dumps({"address": "next:1", "epoch": 2}).encode(),
                  ephemeral=True)
    view.read([0], members=False)
    assert view.listing(0, fence.epoch) is None  # not kept: the records read ahead are not held for ever


class Logged:
    """A kazoo client that logs, in order, each request a reader sends (its kind and path) and each wait
    for an answer; ``before_commit`` runs as a transaction is about to be sent."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self.log: list[tuple[str, str]] = []
        self.before_commit: Callable[[], None] = lambda: None

    def _sent(self, kind: str, result: Any) -> Any:
        self.log.append(("send", kind))
        wait = result.get

        def get(*args: Any, **kwargs: Any) -> Any:
            self.log.append(("wait", kind))
            return wait(*args, **kwargs)

        result.get = get
        return result

    def exists_async(self, path: str, watch: Any = None) -> Any:
        return self._sent(f"exists {path.rsplit('/', 1)[-1]}", self._client.exists_async(path, watch=watch))

    def get_children_async(self, path: str, watch: Any = None) -> Any:
        return self._sent(f"list {path.rsplit('/', 1)[-1]}", self._client.get_children_async(path, watch=watch))

    def get_async(self, path: str, watch: Any = None) -> Any:
        return self._sent(f"get {path.rsplit('/', 1)[-1]}", self._client.get_async(path, watch=watch))

    def transaction(self) -> Any:
        tx = self._client.transaction()
        commit = tx.commit_async

        def commit_async() -> Any:
            self.before_commit()
            return self._sent("claim", commit())

        tx.commit_async = commit_async  # type: ignore[method-assign]
        return tx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def _logged_reader(client: KazooClient) -> tuple[ViewReader, Logged]:
    logged = Logged(client)
    made = ViewReader(logged, f"/groupcoord/test-{uuid.uuid4().hex[:8]}", 2, 10.0,  # type: ignore[arg-type]
                      on_leader=lambda event: None, on_members=lambda event: None)
    made.prepare()
    return made, logged


def test_a_claims_group_records_are_read_while_the_claim_is_in_flight(client: KazooClient) -> None:
    view, logged = _logged_reader(client)
    for name in ("g_a", "g_b"):
        client.create(f"{view.shard_path(0)}/groups/{name}", name.encode(), makepath=True)
    client.set(f"{view.shard_path(0)}/epoch", b"")  # epoch 1, known from the leader node we read next
    client.create(f"{view.shard_path(0)}/leader", json.dumps({"address": "old:1", "epoch": 1}).encode(),
                  ephemeral=True)
    view.read([0], members=False)
    client.delete(f"{view.shard_path(0)}/leader")  # its session ended
    logged.log.clear()
    fence = dict(view.win({0: None}, "new:1"))[0]
    assert fence is not None and fence.epoch == 2
    assert logged.log == [
        ("send", "exists leader"), ("send", "list groups"), ("send", "claim"),  # one pipeline
        ("wait", "exists leader"), ("wait", "list groups"),  # answered before the claim (a read before a write)
        ("send", "get g_a"), ("send", "get g_b"),  # the records go out before the claim's answer is waited for
        ("wait", "claim")]
    listed = view.listing(0, fence.epoch)
    assert listed is not None and listed.names == ["g_a", "g_b"]
    assert {name: read.get(timeout=10)[0] for name, read in listed.heads.items()} == {"g_a": b"g_a", "g_b": b"g_b"}


def test_records_read_ahead_while_a_leader_node_was_there_are_not_served(client: KazooClient) -> None:
    """A claim that believed the shard free while its last leader was still writing: the leader node
    is there at the claim's first read, the old leader writes a group and resigns, then the claim
    wins. What was read ahead misses that group, so it must not be served: the store lists again."""
    view, logged = _logged_reader(client)
    old = dict(view.win({0: None}, "old:1"))[0]  # old:1 leads at epoch 1 (on the same client: the fence is what counts)
    assert old is not None
    view.listing(0, old.epoch)
    old_store = ZooKeeperStore(client, f"{view.shard_path(0)}/groups", _Fixed(old))
    old_store.save("early", {"generation": 1})

    def the_old_leader_writes_and_resigns() -> None:
        for _, result in pending:
            result.get(timeout=10)  # the exists and the listing were answered: the read-ahead saw no "late"
        old_store.save("late", {"generation": 1})
        resign(client, old, 10.0)

    pending: list[tuple[str, Any]] = []
    sent = logged._sent

    def keep(kind: str, result: Any) -> Any:
        pending.append((kind, result))
        return sent(kind, result)

    logged._sent = keep  # type: ignore[method-assign]
    logged.before_commit = the_old_leader_writes_and_resigns
    new = dict(view.win({0: None}, "new:1"))[0]
    assert new is not None and new.epoch == 2  # the claim won: the leader node was gone by then
    assert view.listing(0, new.epoch) is None  # but its read-ahead is not vouched for
    store = ZooKeeperStore(client, f"{view.shard_path(0)}/groups", _Fixed(new))
    assert sorted(store.load_all()) == ["early", "late"]


class _Fixed:
    """A fencer for a store that writes under one fence."""

    def __init__(self, fence: Fence) -> None:
        self._fence = fence

    def fence(self) -> Fence:
        return self._fence

    def recheck(self) -> None:
        pass
