"""Per-shard elections (``ShardElections``) in one process on a real ZooKeeper: several members,
each with its own kazoo session. Spread, fencing per shard, session expiry, a clean leave, and
the cluster's shard count."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.shard_election import ShardElections, ensure_cluster
from groupcoord.coordinator.ha.zk_store import ZooKeeperStore
from groupcoord.coordinator.storage.store import FencedError
from tests.zookeeper_server import ZooKeeperServer, expire_session, wait_until

pytestmark = pytest.mark.slow

SHARDS = 8
SESSION_S = 2.0


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def members(zk: ZooKeeperServer) -> Iterator[Callable[..., ShardElections]]:
    root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
    made: list[tuple[ShardElections, KazooClient]] = []

    def make(address: str, *, auto_drain: bool = True, handover_timeout: float = 2.0) -> ShardElections:
        client = connect(zk.hosts, session_timeout=SESSION_S)
        elections = ShardElections(client, root, address, SHARDS, session_timeout=SESSION_S,
                                   handover_timeout=handover_timeout)
        if auto_drain:  # no runtime here: a shard handed over is drained at once
            for office in elections.offices:
                office.watch(lambda office=office: office.drained() if not office.in_office() else None)
        made.append((elections, client))
        elections.start()
        return elections

    yield make
    for elections, client in made:
        elections.stop()
        client.stop()
        client.close()


def led(elections: ShardElections) -> set[int]:
    return {s for s in range(SHARDS) if elections.leads(s)}


def test_members_split_the_shards_and_fence_each_other(zk: ZooKeeperServer,
                                                       members: Callable[..., ShardElections]) -> None:
    a = members("a:1")
    wait_until(lambda: led(a) == set(range(SHARDS)), 20, "a alone leads every shard")
    b = members("b:1")
    wait_until(lambda: len(led(a)) == len(led(b)) == SHARDS // 2, 20, "a and b lead half each")
    assert not led(a) & led(b)
    wait_until(lambda: a.coordinators() == b.coordinators() == ["a:1", "b:1"], 10, "both see both")
    shard_a, shard_b = min(led(a)), min(led(b))
    wait_until(lambda: a.leader(shard_b) == b.leader(shard_b) == ("b:1", b.epoch(shard_b)), 10, "a sees b lead")
    with pytest.raises(FencedError):
        a.fence(shard_b)
    client = KazooClient(hosts=zk.hosts)
    client.start(10)
    try:
        mine = ZooKeeperStore(client, a.groups_path(shard_a), a.fencer(shard_a))
        mine.save("g", {"v": 1})
        assert mine.load_all() == {"g": {"v": 1}}
        theirs = ZooKeeperStore(client, a.groups_path(shard_b), a.fencer(shard_b))
        with pytest.raises(FencedError):
            theirs.save("g", {"v": 1})
    finally:
        client.stop()
        client.close()


def test_an_expired_session_loses_every_shard_and_its_writes_are_refused(
        zk: ZooKeeperServer, members: Callable[..., ShardElections]) -> None:
    a, b = members("a:1"), members("b:1")
    wait_until(lambda: len(led(a)) == len(led(b)) == SHARDS // 2, 20, "spread")
    lost = sorted(led(b))
    epochs = {s: b.epoch(s) for s in lost}
    fence = b.fence(lost[0])
    expire_session(zk.hosts, b._client)

    def new_terms() -> dict[int, tuple[str, int]] | None:
        """Each lost shard's leader in a later term, as a sees them: a, or b back with a new session (it
        reconnects at once, and may register before a plans: then the hand-out gives b its shards back)."""
        leaders = {s: a.leader(s) for s in lost}
        return leaders if all(x is not None and x[1] > epochs[s] for s, x in leaders.items()) else None  # type: ignore[return-value]

    wait_until(new_terms, 30, "every shard b lost led in a new term")
    terms = new_terms()
    assert terms is not None and fence.epoch < terms[lost[0]][1]
    tx = a._client.transaction()
    fence.apply(tx)
    tx.create(f"{a.groups_path(lost[0])}-stale-write", b"x")
    results = tx.commit()
    assert isinstance(results[0], BadVersionError) or isinstance(results[1], (BadVersionError, NoNodeError)), results
    assert a._client.exists(f"{a.groups_path(lost[0])}-stale-write") is None
    wait_until(lambda: len(led(a)) == len(led(b)) == SHARDS // 2, 30, "b back with a new session, spread again")


def test_a_member_that_stops_hands_its_shards_to_the_others_at_once(members: Callable[..., ShardElections]) -> None:
    a, b = members("a:1"), members("b:1")
    wait_until(lambda: len(led(a)) == len(led(b)) == SHARDS // 2, 20, "spread")
    gone = sorted(led(b))
    b.stop()
    zk_client = a._client
    for shard in gone:  # resigned on the way out: nobody waits for b's session to expire
        node = zk_client.exists(f"{a.shard_path(shard)}/leader")
        assert node is None or zk_client.get(f"{a.shard_path(shard)}/leader")[0].startswith(b'{"address": "a:1"')
    assert zk_client.exists(f"{a.members_path}/b%3A1") is None
    wait_until(lambda: led(a) == set(range(SHARDS)), 20, "a leads every shard")
    assert a.coordinators() == ["a:1"]


def test_a_hand_over_keeps_the_fence_until_drained_and_points_clients_to_the_receiver(
        members: Callable[..., ShardElections]) -> None:
    a = members("a:1", auto_drain=False, handover_timeout=60.0)
    wait_until(lambda: led(a) == set(range(SHARDS)), 20, "a alone leads every shard")
    b = members("b:1")
    wait_until(lambda: bool(a.moves()), 20, "a starts handing over")
    (shard, receiver), *_ = sorted(a.moves().items())
    assert receiver == "b:1"
    office = a.offices[shard]
    assert not office.in_office()  # stops admitting the shard's requests at once ...
    assert office.active_address() == "b:1"  # ... pointing its clients to the receiver ...
    assert a.fence(shard).epoch == office.term() > 0  # ... while its last writes may still land
    assert not b.leads(shard)
    for moving in list(a.moves()):
        a.offices[moving].drained()  # the runtime says: unloaded, no write in flight
    wait_until(lambda: b.leads(shard), 20, "b takes the drained shard")
    with pytest.raises(FencedError):
        a.fence(shard)

    def drain_and_look() -> bool:  # the rest of the hand-over, each shard drained as the runtime would
        for moving in list(a.moves()):
            a.offices[moving].drained()
        return len(led(a)) == len(led(b)) == SHARDS // 2

    wait_until(drain_and_look, 30, "a and b lead half each")


def test_the_shard_count_is_fixed_at_the_first_start(zk: ZooKeeperServer) -> None:
    client = connect(zk.hosts, session_timeout=SESSION_S)
    root = f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
    try:
        ensure_cluster(client, root, 64)
        ensure_cluster(client, root, 64)
        with pytest.raises(ValueError, match="has 64 shards, this coordinator is configured with 32"):
            ensure_cluster(client, root, 32)
    finally:
        client.stop()
        client.close()


def quiet(elections: list[ShardElections], for_s: float = 1.0) -> Callable[[], bool]:
    """A predicate: true once no member's read count has moved for ``for_s`` seconds (polled)."""
    last: list[tuple[list[int], float]] = [([], 0.0)]

    def check() -> bool:
        now, seen = [e.reads for e in elections], time.monotonic()
        if now != last[0][0]:
            last[0] = (now, seen)
        return seen - last[0][1] >= for_s

    return check


def test_a_shard_changing_hands_costs_each_member_a_few_reads_not_a_round(zk: ZooKeeperServer) -> None:
    """Elections by delta (issue 37): a watch event makes each member read the node it names, not every
    shard's. Before, each member re-read all 64 leader nodes (and its member node and the members)
    on every event: 66 reads at least per member and change."""
    shards, root = 64, f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
    # sessions and pauses long enough that the machine's load cannot end a term and move shards here
    clients = [connect(zk.hosts, session_timeout=10.0) for _ in range(4)]
    members = [ShardElections(c, root, f"m{i}:1", shards, session_timeout=10.0, max_pause=30.0)
               for i, c in enumerate(clients)]
    for elections in members:
        for office in elections.offices:
            office.watch(lambda office=office: office.drained() if not office.in_office() else None)
        elections.start()
    try:
        def spread() -> bool:
            return [len([s for s in range(shards) if e.leads(s)]) for e in members] == [16] * 4

        wait_until(spread, 60, "16 shards each")
        wait_until(quiet(members), 30, "no more reads")
        before = [e.reads for e in members]
        owner = members[1]
        shard = min(s for s in range(shards) if owner.leads(s))
        epoch = owner.epoch(shard)
        owner._client.delete(f"{owner.shard_path(shard)}/leader")  # the shard is free: someone takes it
        wait_until(lambda: spread() and any(e.epoch(shard) > epoch for e in members), 30, "the shard led again")
        wait_until(quiet(members), 30, "no more reads")
        spent = [e.reads - b for e, b in zip(members, before, strict=True)]
        assert all(0 < n <= 6 for n in spent), spent  # its deletion (and the members), its creation, the epoch

        before = [e.reads for e in members]
        members[3].stop()  # a member leaves: its 16 shards change hands
        wait_until(lambda: [len([s for s in range(shards) if e.leads(s)]) for e in members[:3]] in
                   ([22, 21, 21], [21, 22, 21], [21, 21, 22]), 60, "the three lead every shard")
        wait_until(quiet(members[:3]), 30, "no more reads")
        spent = [e.reads - b for e, b in zip(members[:3], before[:3], strict=True)]
        assert all(n <= 4 * 16 + 8 for n in spent), spent  # O(shards moved), not a round per event
    finally:
        for elections, client in zip(members, clients, strict=True):
            elections.stop()
            client.stop()
            client.close()
