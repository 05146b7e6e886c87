"""A coordinator's death named by its member node's event (issue 37): one departure alone is claimed
with the members' read still in flight, one round trip after the expiry instead of two; a second
departure soon after waits for the read, as ten deaths at once must (``coordinator.ha.departures``).

The real-ZooKeeper tests hold the survivors' reads of the members' names until the test lets them
answer: a claim that goes out while they are held can only have been planned on the named departure."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kazoo.client import KazooClient

from groupcoord.coordinator.ha import departures
from groupcoord.coordinator.ha.departures import Departures
from groupcoord.coordinator.ha.election import connect
from groupcoord.coordinator.ha.shard_election import ShardElections, ShardOffice
from tests.coordinator.ha.test_shard_election import quiet
from tests.zookeeper_server import ZooKeeperServer, wait_until

SHARDS = 8
SESSION_S = 10.0  # long: only the test ends a session here
OP_TIMEOUT = 120.0  # a held read must outlast the test's waits, not time the step out


@pytest.fixture(autouse=True)
def plan_on_departure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(departures, "PLAN_ON_DEPARTURE", True)  # off by default (see its module): tested on


# -- the decision alone ------------------------------------------------------------------------------


def test_one_named_departure_is_planned_on_at_once() -> None:
    assert Departures(burst_s=10.0).members_now("a", ["a", "b", "c"], ["c"], vacated=["c"], now=100.0) == ["a", "b"]


def test_off_every_step_waits_for_the_members_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(departures, "PLAN_ON_DEPARTURE", False)
    assert Departures(burst_s=10.0).members_now("a", ["a", "b", "c"], ["c"], vacated=["c"], now=100.0) is None


def test_one_departure_waits_until_no_deletion_has_come_for_a_moment() -> None:
    seen = Departures(burst_s=10.0, quiet_s=0.1)  # a burst's next sessions end right behind the first
    assert seen.members_now("a", ["a", "b", "c"], ["c"], ["c"], now=100.0, last_deletion=99.95) is None
    assert seen.members_now("a", ["a", "b", "c"], ["c"], ["c"], now=100.0, last_deletion=99.85) == ["a", "b"]


@pytest.mark.parametrize(("departed", "vacated", "why"), [
    ([], ["c"], "a shard freed, its leader's departure not named yet"),
    (["c", "b"], ["c", "b"], "two departures in one step: a burst"),
    (["c"], ["c", "b"], "a live member gave a shard up too (a graceful hand-over)"),
    (["x"], [], "a member we never read"),
    (["a"], [], "our own node"),
])
def test_the_members_read_is_waited_for_when(departed: list[str], vacated: list[str], why: str) -> None:
    assert Departures(burst_s=10.0).members_now("a", ["a", "b", "c"], departed, vacated, now=100.0) is None, why


def test_a_departure_soon_after_another_is_part_of_a_burst_until_it_has_been_quiet() -> None:
    seen = Departures(burst_s=10.0)
    seen.took(["c"], now=100.0)
    assert seen.members_now("a", ["a", "b", "d"], ["d"], vacated=["d"], now=109.0) is None
    seen.took(["d"], now=109.0)
    assert seen.members_now("a", ["a", "b", "e"], ["e"], vacated=[], now=118.0) is None  # 9 s after d
    assert seen.members_now("a", ["a", "b", "e"], ["e"], vacated=[], now=119.5) == ["a", "b"]
    seen.took([], now=125.0)  # a step that took none changes nothing
    assert seen.members_now("a", ["a", "b", "e"], ["e"], vacated=[], now=125.0) == ["a", "b"]


# -- on a real ZooKeeper -----------------------------------------------------------------------------


class HeldRead:
    """A members' read whose answer is held until ``gate`` opens; ``log`` notes when the step waits on it."""

    def __init__(self, inner: Any, gate: threading.Event, log: list[str]) -> None:
        self._inner, self._gate, self._log = inner, gate, log

    def ready(self) -> bool:
        return self._gate.is_set() and bool(self._inner.ready())

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self._log.append("members read")
        if not self._gate.wait(timeout):
            raise TimeoutError("held members' read")
        return self._inner.get(block, timeout)

    def rawlink(self, callback: Any) -> None:
        def later() -> None:
            self._gate.wait()
            self._inner.rawlink(lambda _: callback(self))

        threading.Thread(target=later, daemon=True).start()


class HoldingClient:
    """A kazoo client whose reads of the members' names, once ``hold`` is called, answer only on ``release``;
    it logs the claims (transactions) and the waits on those reads, in order."""

    def __init__(self, client: KazooClient, members_path: str) -> None:
        self._client, self._members_path = client, members_path
        self._gate: threading.Event | None = None
        self.log: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def hold(self) -> None:
        self._gate = threading.Event()
        self.log.clear()

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
        self._gate = None

    def get_children_async(self, path: str, watch: Any = None) -> Any:
        result = self._client.get_children_async(path, watch=watch)
        gate = self._gate
        return result if gate is None or path != self._members_path else HeldRead(result, gate, self.log)

    def transaction(self) -> Any:
        if self._gate is not None:
            self.log.append("claim")
        return self._client.transaction()


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


class Cluster:
    """Survivors with holding clients and members that die by closing their session (as a SIGKILL's
    expiry does: one transaction deletes the member node and every leader node)."""

    def __init__(self, zk: ZooKeeperServer) -> None:
        self.zk, self.root = zk, f"/groupcoord/test-{uuid.uuid4().hex[:8]}"
        self.made: list[tuple[ShardElections, KazooClient]] = []
        self.holding: dict[str, HoldingClient] = {}

    def member(self, address: str, *, holding: bool = False) -> ShardElections:
        client = connect(self.zk.hosts, session_timeout=SESSION_S)
        used: Any = client
        if holding:
            used = self.holding[address] = HoldingClient(client, f"{self.root}/members")
        elections = ShardElections(cast(KazooClient, used), self.root, address, SHARDS, session_timeout=SESSION_S,
                                   op_timeout=OP_TIMEOUT, max_pause=60.0, burst_s=60.0)
        for office in elections.offices:  # no runtime here: a shard handed over is drained at once
            office.watch(drain_when_out(office))
        self.made.append((elections, client))
        elections.start()
        return elections

    def die(self, elections: ShardElections) -> None:
        client = next(c for e, c in self.made if e is elections)
        client.stop()  # closes the session: ZooKeeper deletes its ephemeral nodes in one transaction

    def close(self) -> None:
        for holder in self.holding.values():
            holder.release()
        for elections, client in self.made:
            elections.stop()
            client.stop()
            client.close()


@pytest.fixture
def cluster(zk: ZooKeeperServer) -> Iterator[Cluster]:
    made = Cluster(zk)
    yield made
    made.close()


def drain_when_out(office: ShardOffice) -> Callable[[], None]:
    def changed() -> None:
        if not office.in_office():
            office.drained()

    return changed


def led(elections: ShardElections) -> set[int]:
    return {s for s in range(SHARDS) if elections.leads(s)}


def spread(*elections: ShardElections) -> bool:
    counts = [len(led(e)) for e in elections]
    return sum(counts) == SHARDS and max(counts) - min(counts) <= 1


@pytest.mark.slow
@pytest.mark.zookeeper
def test_a_lone_death_is_claimed_before_the_members_read_answers(cluster: Cluster) -> None:
    a, b = cluster.member("a:1", holding=True), cluster.member("b:1", holding=True)
    c = cluster.member("c:1")
    wait_until(lambda: spread(a, b, c) and a.coordinators() == b.coordinators() == ["a:1", "b:1", "c:1"], 60,
               "spread over three")
    wait_until(quiet([a, b, c]), 60, "no step in flight")
    lost = led(c)
    before = {e.address: e.reads for e in (a, b)}
    for holder in cluster.holding.values():
        holder.hold()
    cluster.die(c)
    wait_until(lambda: led(a) | led(b) == set(range(SHARDS)), 60, "c's shards led again, the members' read held")
    wait_until(lambda: all("members read" in h.log for h in cluster.holding.values()), 60, "both waiting on the read")
    for e in (a, b):
        log = cluster.holding[e.address].log
        assert "claim" not in log or log.index("claim") < log.index("members read"), (e.address, log)
        # the members (1, held) and each freed shard's exists watch: no get, no epoch read
        assert e.reads - before[e.address] <= 1 + len(lost), (e.address, e.reads - before[e.address], lost)
    assert any("claim" in h.log for h in cluster.holding.values())
    for holder in cluster.holding.values():
        holder.release()
    wait_until(lambda: a.coordinators() == b.coordinators() == ["a:1", "b:1"], 60, "the members as read")
    wait_until(lambda: spread(a, b), 60, "even over two")


@pytest.mark.slow
@pytest.mark.zookeeper
def test_a_second_death_soon_after_waits_for_the_members_read(cluster: Cluster,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="groupcoord.ha.shards")
    a, b = cluster.member("a:1", holding=True), cluster.member("b:1", holding=True)
    c, d = cluster.member("c:1"), cluster.member("d:1")
    wait_until(lambda: spread(a, b, c, d) and a.coordinators() == b.coordinators() == ["a:1", "b:1", "c:1", "d:1"],
               60, "spread over four")
    cluster.die(c)  # the first: planned on its named departure
    wait_until(lambda: a.coordinators() == b.coordinators() == ["a:1", "b:1", "d:1"] and spread(a, b, d), 60,
               "c's shards led again")
    wait_until(quiet([a, b, d]), 60, "no step in flight")
    lost = led(d)
    for holder in cluster.holding.values():
        holder.hold()
    cluster.die(d)  # within burst_s of c: read first

    def waiting(address: str) -> bool:
        return any(r.getMessage() == f"{address} waits for the members' read to plan (departures named: ['d:1'])"
                   for r in caplog.records)

    wait_until(lambda: waiting("a:1") and waiting("b:1"), 60, "both survivors waiting for the read, d named")
    assert not (led(a) | led(b)) & lost
    assert all("claim" not in h.log for h in cluster.holding.values()), {k: h.log for k, h in cluster.holding.items()}
    for holder in cluster.holding.values():
        holder.release()
    wait_until(lambda: a.coordinators() == b.coordinators() == ["a:1", "b:1"] and spread(a, b), 60,
               "d's shards led again once read")
