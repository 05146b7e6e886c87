"""Sharded coordinators: real ``groupcoord serve --sharded`` processes on a real ZooKeeper.

The clients here are raw gRPC stubs (the worker's own FindCoordinator routing is tested with the
worker): each group has one member that joined and synced at its shard's leader; after a shard
moves (a coordinator joins, dies or is paused past its session), the same member id and
generation must be accepted by the new leader: no rebalance.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.ha.sharded import Cluster, call, until_answered
from tests.zookeeper_server import ZooKeeperServer, wait_until

pytestmark = pytest.mark.slow

SHARDS = 12
ZK_SESSION_S = 2.0
GROUPS = [f"g{i}" for i in range(24)]


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


@dataclass
class Member:
    group_id: str
    member_id: str
    generation: int


def join_and_sync(bootstrap: str, group_id: str) -> Member:
    def join(member_id: str) -> Callable[[str], object]:
        return lambda address: call(address, "JoinGroup", pb.JoinGroupRequest(
            group_id=group_id, member_id=member_id, client_id="m", session_timeout_ms=60_000,
            rebalance_timeout_ms=10_000, protocols=["round-robin"]))

    put = until_answered(lambda address: call(address, "PutTasks", pb.PutTasksRequest(
        group_id=group_id, tasks=[pb.Task(task_id="t")])), bootstrap, group_id)
    assert isinstance(put, pb.PutTasksResponse) and put.error.code == pb.NONE, put
    for _ in range(5):
        first = until_answered(join(""), bootstrap, group_id)
        assert isinstance(first, pb.JoinGroupResponse) and first.error.code == pb.MEMBER_ID_REQUIRED
        joined = until_answered(join(first.member_id), bootstrap, group_id)
        assert isinstance(joined, pb.JoinGroupResponse)
        if joined.error.code != pb.UNKNOWN_MEMBER_ID:
            break
        # the shard moved between the two joins: a pending id is not stored (nor is it in Kafka), so the
        # new leader does not know it and the client starts over with no id, as a worker does
    assert joined.error.code == pb.NONE, joined
    synced = until_answered(lambda address: call(address, "SyncGroup", pb.SyncGroupRequest(
        group_id=group_id, member_id=joined.member_id, generation=joined.generation, protocol_name="round-robin",
        assignments=[pb.MemberAssignment(member_id=joined.member_id, tasks=[pb.TaskReplica(task_id="t")])])),
        bootstrap, group_id)
    assert isinstance(synced, pb.SyncGroupResponse) and synced.error.code == pb.NONE, synced
    return Member(group_id, joined.member_id, joined.generation)


def still_member(bootstrap: str, member: Member) -> None:
    """The member's heartbeat, at wherever its group is now, is accepted as is: no rebalance."""
    beat = until_answered(lambda address: call(address, "Heartbeat", pb.HeartbeatRequest(
        group_id=member.group_id, member_id=member.member_id, generation=member.generation)),
        bootstrap, member.group_id)
    assert isinstance(beat, pb.HeartbeatResponse) and beat.error.code == pb.NONE, (member, beat)


@pytest.fixture
def cluster(tmp_path: Path, zk: ZooKeeperServer, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with Cluster(tmp_path, zk, f"/groupcoord/{request.node.name}", shards=SHARDS, zk_session_s=ZK_SESSION_S) as made:
        yield made


def test_shards_spread_and_a_joiner_takes_its_share_without_a_rebalance(cluster: Cluster) -> None:
    a, b = cluster.start_many(2)
    cluster.wait_balanced([a, b])
    members = [join_and_sync(a, g) for g in GROUPS]
    c = cluster.start()
    after = cluster.wait_balanced([a, b, c])
    assert sum(1 for leader, _ in after.values() if leader == c) in (SHARDS // 3, SHARDS // 3 + 1)
    assert any(after[shard_of(m.group_id, SHARDS)][0] == c for m in members), "no group moved: a weak test"
    for member in members:
        still_member(b, member)
    assert "hands over shards" in cluster.log_of(a) + cluster.log_of(b)


@pytest.mark.heavy  # three coordinator processes on ZooKeeper, one killed: 13-18 s
def test_a_killed_coordinators_shards_go_to_the_others_and_only_theirs_move(cluster: Cluster) -> None:
    a, b, c = cluster.start_many(3)
    before = cluster.wait_balanced([a, b, c])
    members = [join_and_sync(a, g) for g in GROUPS]
    cluster.procs[2].kill()
    after = cluster.wait_balanced([a, b])
    for shard, (leader, epoch) in before.items():
        if leader != c:
            assert after[shard][1] >= epoch
        else:
            assert after[shard][0] in (a, b) and after[shard][1] > epoch
    for member in members:
        still_member(a, member)


def test_a_coordinator_paused_past_its_session_serves_nothing_for_the_shards_it_lost(cluster: Cluster) -> None:
    a, b = cluster.start_many(2)
    before = cluster.wait_balanced([a, b])
    members = [join_and_sync(a, g) for g in GROUPS]
    on_b = [m for m in members if before[shard_of(m.group_id, SHARDS)][0] == b]
    assert on_b, "some groups must live on b"
    cluster.procs[1].send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: all(leader == a for leader, _ in cluster.leaders(a).values())
                   and len(cluster.leaders(a)) == SHARDS, 30, "a leads every shard")
        for member in on_b:  # the groups go on at a, unchanged
            still_member(a, member)
    finally:
        cluster.procs[1].send_signal(signal.SIGCONT)
    # b, resumed: before it has looked at ZooKeeper again, it must not act for the shards it lost
    for member in on_b:
        answer = call(b, "Heartbeat", pb.HeartbeatRequest(group_id=member.group_id, member_id=member.member_id,
                                                          generation=member.generation))
        assert isinstance(answer, pb.HeartbeatResponse)
        if answer.error.code == pb.NONE:  # only if b has won the shard back since, with a newer epoch
            leader, epoch = cluster.leaders(a)[shard_of(member.group_id, SHARDS)]
            assert leader == b and epoch > before[shard_of(member.group_id, SHARDS)][1]
    assert "stops leading shards" in cluster.log_of(b)
    cluster.wait_balanced([a, b])
    for member in members:
        still_member(a, member)


def test_a_coordinator_configured_with_another_shard_count_refuses_to_start(cluster: Cluster) -> None:
    a = cluster.start()
    cluster.wait_balanced([a])
    log, refused = cluster.launch(shards=SHARDS + 1)
    assert refused.wait(30) != 0
    text = log.read_text()
    assert f"has {SHARDS} shards, this coordinator is configured with {SHARDS + 1}" in text
    assert "Traceback" not in text
