"""A Session stream on a sharded cluster (real ``groupcoord serve --sharded`` processes, real ZooKeeper): a
stream goes to one coordinator; when shards move away from it, their members on the stream hear
CoordinatorMoved and the stream stays open for the others; a moved member goes on at its new coordinator,
on that one's stream, with the same member id and generation (no rejoin)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.ha.sharded import Cluster
from tests.coordinator.ha.test_sharded_cluster import GROUPS, SHARDS, ZK_SESSION_S, Member, join_and_sync
from tests.coordinator.rpc.session_client import RawSession
from tests.zookeeper_server import ZooKeeperServer

pytestmark = [pytest.mark.slow, pytest.mark.zookeeper, pytest.mark.heavy]  # three sharded serve processes:
# 16-60 s of a 4-worker make test; CI runs it in make test-heavy


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as server:
        yield server


def beat(session: RawSession, member: Member) -> pb.HeartbeatResponse:
    answer: pb.HeartbeatResponse = session.ask("heartbeat", pb.HeartbeatRequest(
        group_id=member.group_id, member_id=member.member_id, generation=member.generation))
    return answer


def test_members_whose_shard_moves_hear_coordinator_moved_and_the_stream_lives_on(
        tmp_path: Path, zk: ZooKeeperServer) -> None:
    with Cluster(tmp_path, zk, "/groupcoord/session-sharded", shards=SHARDS, zk_session_s=ZK_SESSION_S) as cluster:
        a, b = cluster.start_many(2)
        before = cluster.wait_balanced([a, b])
        members = [join_and_sync(a, g) for g in GROUPS]
        on_a = [m for m in members if before[shard_of(m.group_id, SHARDS)][0] == a]
        assert len(on_a) >= 4, "too few groups on a: a weak test"
        with grpc.insecure_channel(a) as channel:
            session = RawSession(channel)
            assert [beat(session, m).error.code for m in on_a] == [pb.NONE] * len(on_a)  # carried by a's stream

            c = cluster.start()
            after = cluster.wait_balanced([a, b, c])
            moved = [m for m in on_a if after[shard_of(m.group_id, SHARDS)][0] != a]
            stayed = [m for m in on_a if after[shard_of(m.group_id, SHARDS)][0] == a]
            assert moved and stayed, "no shard of a's groups moved (or all did): a weak test"
            news = session.news(len(moved), timeout=30)
            assert {(n.group_id, n.member_id) for n in news} == {(m.group_id, m.member_id) for m in moved}
            assert {n.WhichOneof("news") for n in news} == {"coordinator_moved"}

            assert not session.ended.is_set()  # the stream lives on for the others
            assert [beat(session, m).error.code for m in stayed] == [pb.NONE] * len(stayed)
            assert {beat(session, m).error.code for m in moved} == {pb.NOT_COORDINATOR}
            assert session.has_news() == []  # told once

        for member in moved:  # each at its new coordinator, on that one's stream: same id and generation
            leader = after[shard_of(member.group_id, SHARDS)][0]
            with grpc.insecure_channel(leader) as channel:
                assert beat(RawSession(channel), member).error.code == pb.NONE
