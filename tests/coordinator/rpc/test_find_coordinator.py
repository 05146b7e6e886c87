"""FindCoordinator and DescribeCluster of an unsharded coordinator, over real gRPC: one process
answers for every group (shard 0 of 1), so a client can always start by asking."""

from __future__ import annotations

import grpc

from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.rpc.service import MAX_FIND_COORDINATOR_GROUPS
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.testing import FakeOffice
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc


def test_a_standalone_coordinator_is_every_groups_coordinator() -> None:
    with ServerThread(CoordinatorRuntime()) as server, grpc.insecure_channel(server.address) as channel:
        found = pb_grpc.GroupCoordinatorStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(group_ids=["a", "", "a", "b"]), timeout=5)
        assert found.error.code == pb.NONE
        assert [(c.group_id, c.address, c.shard, c.error.code) for c in found.coordinators] == [
            ("a", server.address, 0, pb.NONE), ("", "", 0, pb.INVALID_GROUP_ID),
            ("a", server.address, 0, pb.NONE), ("b", server.address, 0, pb.NONE)]
        too_many = pb_grpc.GroupCoordinatorStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(group_ids=["g"] * (MAX_FIND_COORDINATOR_GROUPS + 1)), timeout=5)
        assert too_many.error.code == pb.INVALID_REQUEST and not too_many.coordinators
        cluster = pb_grpc.GroupAdminStub(channel).DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
        assert cluster.mode == "standalone" and cluster.shards == 1
        assert [(c.address, c.shards_led, c.self) for c in cluster.coordinators] == [(server.address, 1, True)]
        assert [(s.shard, s.leader, s.state, s.groups) for s in cluster.shard_infos] == [
            (0, server.address, pb.SHARD_ACTIVE, 0)]


def test_the_advertised_address_is_answered_not_the_listen_address() -> None:
    router = ShardRouter([CoordinatorRuntime()])
    router.advertised = "coord-1.example:9400"
    with ServerThread(router) as server, grpc.insecure_channel(server.address) as channel:
        found = pb_grpc.GroupCoordinatorStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(group_ids=["a"]), timeout=5)
        assert found.coordinators[0].address == "coord-1.example:9400"


def test_a_standby_answers_the_actives_address_or_not_available() -> None:
    office = FakeOffice(in_office=False, term=0, address="active.example:9400")
    runtime = ShardRouter([CoordinatorRuntime(office=office)])  # an unsharded coordinator: one shard
    runtime.advertised = "standby.example:9400"
    found = runtime.locate("g")
    assert (found.address, found.shard, found.error.code) == ("active.example:9400", 0, pb.NONE)
    cluster = runtime.describe_cluster()
    assert cluster.mode == "active-standby"
    assert [(c.address, c.shards_led, c.self) for c in cluster.coordinators] == [
        ("standby.example:9400", 0, True), ("active.example:9400", 1, False)]
    office.change(address="")  # between terms: nobody is active
    assert runtime.locate("g").error.code == pb.COORDINATOR_NOT_AVAILABLE
    office.change(in_office=True, term=4)
    found = runtime.locate("g")
    assert (found.address, found.epoch, found.error.code) == ("standby.example:9400", 4, pb.NONE)
