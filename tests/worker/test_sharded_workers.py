"""Real WorkerClient and AsyncWorkerClient members of a sharded cluster: ``groupcoord serve --sharded``
processes on a real ZooKeeper (the cluster helper of tests/coordinator/ha/sharded.py).

One group per shard, so whichever shards move, groups move with them. Each worker is given a
bootstrap list that does not include its shard's leader: it must find it with FindCoordinator.
When its shard's leader is SIGKILLed, or a fourth coordinator takes the shard, the worker follows
with the same member id and generation and its listener hears of no rebalance.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig, WorkerState
from tests.coordinator.ha.sharded import Cluster
from tests.processes import stop_processes
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = pytest.mark.slow

SHARDS = 12

# one group for each shard
GROUPS = sorted({shard_of(g, SHARDS): g for g in (f"orders-{i}" for i in range(200))}.values(),
                key=lambda g: shard_of(g, SHARDS))
assert len(GROUPS) == SHARDS


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@pytest.fixture
def cluster(tmp_path: Path, zk: ZooKeeperServer, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    made = Cluster(tmp_path, zk, f"/groupcoord/{request.node.name}", shards=SHARDS, zk_session_s=2.0)
    try:
        yield made
    finally:
        stop_processes(made.procs)


@dataclass
class Events:
    """What a member's listener heard: after the first assignment, any event is a rebalance."""

    seen: list[str] = field(default_factory=list)

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        self.seen.append(f"assigned {len(tasks)} in {generation}")

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        self.seen.append("revoked")

    def on_lost(self, tasks: Sequence[TaskReplica]) -> None:
        self.seen.append("lost")


def config(group_id: str, bootstrap: Sequence[str], name: str) -> WorkerConfig:
    return WorkerConfig(group_id=group_id, coordinators=tuple(bootstrap), client_id=name, session_timeout_ms=10_000,
                        heartbeat_interval_ms=300, rebalance_timeout_ms=5_000, retry_backoff_ms=50,
                        retry_backoff_max_ms=500)


class AsyncMembers:
    """AsyncWorkerClients on one event loop of their own thread (as an asyncio service runs them)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.clients: list[AsyncWorkerClient] = []

    def start(self, worker_config: WorkerConfig, listener: Events) -> AsyncWorkerClient:
        client = AsyncWorkerClient(worker_config, listener)
        asyncio.run_coroutine_threadsafe(client.start(), self.loop).result(10)
        self.clients.append(client)
        return client

    def close(self) -> None:
        async def close_all() -> None:
            await asyncio.gather(*(c.close() for c in self.clients), return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class Member:
    group_id: str
    client: Any  # WorkerClient | AsyncWorkerClient: both read the same properties (MemberView)
    events: Events
    member_id: str = ""
    generation: int = -1


@pytest.fixture
def members() -> Iterator[tuple[list[Member], AsyncMembers]]:
    made: list[Member] = []
    aio = AsyncMembers()
    try:
        yield made, aio
    finally:
        for member in made:
            if isinstance(member.client, WorkerClient):
                member.client.close()
        aio.close()


def join_every_group(cluster: Cluster, leaders: dict[int, tuple[str, int]], made: list[Member],
                     aio: AsyncMembers) -> None:
    """One member per group, threaded and asyncio in turn among the groups of each coordinator (so
    every coordinator that leads two shards or more has both kinds, however the shards fell), each
    bootstrapped with the coordinators that do not lead its shard; every member Stable with its task."""
    with AdminClient(cluster.addresses[0]) as admin:
        for group in GROUPS:
            admin.put_tasks(group, ["t0"])
    seen_at: dict[str, int] = {}
    for group in GROUPS:
        shard = shard_of(group, SHARDS)
        bootstrap = [a for a in cluster.addresses if a != leaders[shard][0]]
        events = Events()
        turn = seen_at[leaders[shard][0]] = seen_at.get(leaders[shard][0], -1) + 1
        if turn % 2 == 0:
            client: Any = WorkerClient(config(group, bootstrap, f"t{shard}"), events).start()
        else:
            client = aio.start(config(group, bootstrap, f"a{shard}"), events)
        made.append(Member(group, client, events))
    wait_until(lambda: all(m.client.state is WorkerState.STABLE and m.client.assigned_tasks and m.events.seen
                           for m in made), 30, "every member Stable with its task, its listener told")
    for member in made:
        member.member_id, member.generation = member.client.member_id, member.client.generation
        assert member.client.coordinator_address == leaders[shard_of(member.group_id, SHARDS)][0]
        assert member.client.coordinator_lookups >= 1
        assert member.events.seen == [f"assigned 1 in {member.generation}"]


def followed_without_a_rebalance(members: list[Member], leaders: dict[int, tuple[str, int]]) -> bool:
    """Every member at its shard's (new) leader, Stable, same member id and generation, nothing heard."""
    return all(m.client.coordinator_address == leaders[shard_of(m.group_id, SHARDS)][0]
               and m.client.state is WorkerState.STABLE for m in members)


def assert_unchanged(cluster: Cluster, live: str, members: list[Member]) -> None:
    for member in members:
        assert (member.client.member_id, member.client.generation) == (member.member_id, member.generation)
        assert len(member.events.seen) == 1, (member.group_id, member.events.seen)
    with AdminClient(live) as admin:  # the coordinators agree: same generation, Stable, one member
        for member in members:
            described = admin.describe_group(member.group_id)
            assert described.state == pb.STABLE and described.generation == member.generation
            assert [d.member.member_id for d in described.members] == [member.member_id]


def test_workers_find_their_shard_leader_and_follow_it_when_it_is_killed(
        cluster: Cluster, members: tuple[list[Member], AsyncMembers]) -> None:
    made, aio = members
    a, b, c = cluster.start(), cluster.start(), cluster.start()
    before = cluster.wait_balanced([a, b, c])
    join_every_group(cluster, before, made, aio)
    on_c = [m for m in made if before[shard_of(m.group_id, SHARDS)][0] == c]
    assert on_c and any(isinstance(m.client, WorkerClient) for m in on_c)
    assert any(isinstance(m.client, AsyncWorkerClient) for m in on_c)

    cluster.procs[2].kill()
    after = cluster.wait_balanced([a, b], timeout=30)
    wait_until(lambda: followed_without_a_rebalance(made, after), 20, "every member at its shard's new leader")
    assert all(m.client.coordinator_lookups >= 2 for m in on_c)  # each asked FindCoordinator again
    assert_unchanged(cluster, a, made)


def test_workers_follow_their_shards_to_a_new_coordinator_without_a_rebalance(
        cluster: Cluster, members: tuple[list[Member], AsyncMembers], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="groupcoord.worker")
    made, aio = members
    a, b, c = cluster.start(), cluster.start(), cluster.start()
    before = cluster.wait_balanced([a, b, c])
    join_every_group(cluster, before, made, aio)
    assert {m.client.coordinator_via for m in made} == {"stream"}

    d = cluster.start()
    after = cluster.wait_balanced([a, b, c, d], timeout=30)
    moved = [m for m in made if after[shard_of(m.group_id, SHARDS)][0] == d]
    assert len(moved) == SHARDS // 4
    wait_until(lambda: followed_without_a_rebalance(made, after), 20, "every member at its shard's new leader")
    assert_unchanged(cluster, d, made)
    # over streams: the old leader told each moved member (CoordinatorMoved), which went on d's stream
    wait_until(lambda: all(m.client.coordinator_via == "stream" for m in made), 20, "every member on a stream")
    told = {r.getMessage().split(":")[0] for r in caplog.records if "coordinator moved" in r.getMessage()}
    assert {m.client.config.client_id for m in moved} <= told, told


def test_workers_find_a_coordinator_they_were_never_given_when_every_bootstrap_address_is_gone(
        cluster: Cluster, members: tuple[list[Member], AsyncMembers]) -> None:
    """The bootstrap list is a starting point: members of b's groups given only a and b learn c from the
    cluster's answer; a is SIGKILLed, then b, and they reach c with the same member id and generation."""
    made, aio = members
    a, b, c = cluster.start(), cluster.start(), cluster.start()
    before = cluster.wait_balanced([a, b, c])
    on_b = [g for g in GROUPS if before[shard_of(g, SHARDS)][0] == b]
    with AdminClient(a) as admin:
        for group in on_b:
            admin.put_tasks(group, ["t0"])
    for turn, group in enumerate(on_b):
        events = Events()
        if turn % 2 == 0:
            made.append(Member(group, WorkerClient(config(group, [a, b], f"t{turn}"), events).start(), events))
        else:
            made.append(Member(group, aio.start(config(group, [a, b], f"a{turn}"), events), events))
    wait_until(lambda: all(m.client.state is WorkerState.STABLE and m.client.assigned_tasks and m.events.seen
                           for m in made), 30, "every member Stable with its task, its listener told")
    for member in made:
        member.member_id, member.generation = member.client.member_id, member.client.generation

    cluster.proc_of(a).kill()
    between = cluster.wait_balanced([b, c], timeout=30)
    still_on_b = [m for m in made if between[shard_of(m.group_id, SHARDS)][0] == b]
    wait_until(lambda: followed_without_a_rebalance(made, between), 30, "every member at its leader")
    assert {type(m.client) for m in still_on_b} == {WorkerClient, AsyncWorkerClient}, "b kept too few groups"
    cluster.proc_of(b).kill()
    after = cluster.wait_balanced([c], timeout=30)
    wait_until(lambda: followed_without_a_rebalance(made, after), 30, "every member at c, never in its list")
    assert_unchanged(cluster, c, made)
