"""Loading a won shard's groups (``ZooKeeperStore.load_all``) on a real ZooKeeper: a failover waits for
it (issue 37), so it costs a few pipelined round trips whatever the number of groups, not one per
group (the listing and the first records come with the win), and the groups the last leader wrote
arrive intact."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from groupcoord.coordinator.ha import shard_reads, zk_store
from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.shard_election import ShardElections
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper]

SHARDS = 2
SESSION_S = 4.0


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


class RoundTrips:
    """The store's view of a kazoo client, counting its reads and the round trips they took: a round
    trip ends when the caller waits for an answer, so requests sent before that wait share one."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self.requests = 0
        self.round_trips = 0
        self._waited = True  # the next request starts a round trip

    def _sent(self, result: Any) -> Any:
        self.requests += 1
        if self._waited:
            self.round_trips += 1
            self._waited = False
        wait = result.get

        def get(*args: Any, **kwargs: Any) -> Any:
            self._waited = True
            return wait(*args, **kwargs)

        result.get = get
        return result

    def get_children_async(self, path: str) -> Any:
        return self._sent(self._client.get_children_async(path))

    def get_async(self, path: str) -> Any:
        return self._sent(self._client.get_async(path))

    def __getattr__(self, name: str) -> Any:  # writes and the rest: the real client
        return getattr(self._client, name)


def _elections(zk: ZooKeeperServer, root: str, address: str) -> tuple[ShardElections, KazooClient]:
    client = connect(zk.hosts, session_timeout=SESSION_S)
    elections = ShardElections(client, root, address, SHARDS, session_timeout=SESSION_S, handover_timeout=2.0)
    for office in elections.offices:  # no runtime here: a shard handed over is drained at once
        office.watch(lambda office=office: office.drained() if not office.in_office() else None)
    elections.start()
    return elections, client


def _record(i: int) -> dict[str, Any]:
    return {"generation": i + 1, "protocol": "range", "leader": f"m-{i}-0",
            "members": [{"member_id": f"m-{i}-{j}", "session_timeout_ms": 30_000} for j in range(3)],
            "assignment": {f"m-{i}-{j}": [[f"t{i}-{j}", 0]] for j in range(3)}}


@pytest.mark.parametrize(("ahead", "requests", "round_trips"), [
    (256, 0, 0),  # every record read with the win, while its claim was in flight: the load waits on nothing new
    (24, 16, 2),  # 24 read ahead: the store reads the other 16 (in its pipelines of 16: the 2nd and 3rd)
    (0, 40, 3),  # none read ahead: each record once, 16 at a time
])
def test_a_won_shard_loads_in_pipelined_round_trips_with_its_groups_intact(
        zk: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch, ahead: int, requests: int, round_trips: int) -> None:
    monkeypatch.setattr(zk_store, "READS_AT_ONCE", 16)  # 40 groups: the listing and 3 pipelines of reads
    monkeypatch.setattr(shard_reads, "RECORDS_AHEAD", ahead)
    root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
    a, a_client = _elections(zk, root, "a:1")
    b, b_client = _elections(zk, root, "b:1")
    try:
        wait_until(lambda: a.leads(0) or b.leads(0), 20, "shard 0 led")
        old, new = (a, b) if a.leads(0) else (b, a)
        written = {f"group/{i}": _record(i) for i in range(40)}
        old_store = ZooKeeperStore(old._client, old.groups_path(0), old.fencer(0))
        for group_id, record in written.items():
            old_store.save(group_id, record)
        old_epoch = old.epoch(0)
        old.stop()  # its shards go at once; the other one wins shard 0
        wait_until(lambda: new.leads(0), 20, "the other coordinator wins shard 0")
        assert new.epoch(0) > old_epoch

        counted = RoundTrips(new._client)
        store = ZooKeeperStore(counted, new.groups_path(0), new.fencer(0))  # type: ignore[arg-type]
        assert store.load_all() == written
        assert counted.requests == requests  # the listing came in the winning pipeline, with the first records
        assert counted.round_trips == round_trips  # not one per record: the reads go out 16 at a time
        assert new.listing(0) is None  # taken once: a second load lists for itself
        assert store.load_all() == written
        assert (counted.requests, counted.round_trips) == (requests + 41, round_trips + 4)

        changed = {**written["group/7"], "generation": 99}
        store.save("group/7", changed)  # the loaded group is the new leader's to write, under its epoch
        assert store.load_all()["group/7"] == changed
    finally:
        for elections, client in ((a, a_client), (b, b_client)):
            elections.stop()
            client.stop()
            client.close()


def test_a_shard_that_never_had_a_group_loads_empty_in_one_round_trip(zk: ZooKeeperServer) -> None:
    client = connect(zk.hosts, session_timeout=SESSION_S)
    try:
        root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}/shards/3/groups"
        counted = RoundTrips(client)
        store = ZooKeeperStore(counted, root, _NoFence())  # type: ignore[arg-type]
        assert store.load_all() == {}
        assert (counted.requests, counted.round_trips) == (1, 1)
        assert client.exists(root) is None  # a load creates nothing: the first write does
    finally:
        client.stop()
        client.close()


class _NoFence:
    """A fencer for a store that only reads."""

    def fence(self) -> Any:
        raise AssertionError("a load takes no fence")

    def recheck(self) -> None:
        raise AssertionError("a load rechecks nothing")


def test_a_store_that_wrote_since_the_win_lists_for_itself(zk: ZooKeeperServer) -> None:
    root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
    a, a_client = _elections(zk, root, "a:1")
    try:
        wait_until(lambda: a.leads(0), 20, "a leads shard 0")
        store = ZooKeeperStore(a._client, a.groups_path(0), a.fencer(0))
        store.save("new", {"generation": 1})  # after the win: the listing read with it does not name it
        assert store.load_all() == {"new": {"generation": 1}}
    finally:
        a.stop()
        a_client.stop()
        a_client.close()
