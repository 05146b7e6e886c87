"""The runtime keyed by shard (``ShardRouter``): several shards in one process, each with its own
office, store, term and writes; one shard's trouble never touches another's. Offices are set by
hand (``FakeOffice``); servers are real gRPC on loopback."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.runtime.shard_map import shard_of
from groupcoord.coordinator.runtime.writers import InlineWriter
from groupcoord.coordinator.storage.store import FencedError, GroupRecord, MemoryStore
from groupcoord.coordinator.testing import FakeOffice, Pending
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.zookeeper_server import wait_until

SHARDS = 2
IN_0 = next(f"g{i}" for i in range(100) if shard_of(f"g{i}", SHARDS) == 0)
IN_1 = next(f"g{i}" for i in range(100) if shard_of(f"g{i}", SHARDS) == 1)


class HandOverOffice(FakeOffice):
    """A FakeOffice that also hears when its shard is drained (``HandOver``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.drained_event = threading.Event()

    def drained(self) -> None:
        self.drained_event.set()


class GatedStore(MemoryStore):
    """Loads and saves wait for the test to open the gate (a slow ZooKeeper), when closed."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def _pass(self) -> None:
        self.waiting.set()
        assert self.gate.wait(30), "the test never opened the gate"

    def load_all(self) -> dict[str, GroupRecord]:
        self._pass()
        return super().load_all()

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        self._pass()
        super().save(group_id, record)


class View:
    """A ``ClusterView`` set by hand."""

    def __init__(self) -> None:
        self.leaders: dict[int, tuple[str, int]] = {}
        self.handing: dict[int, str] = {}

    def leader(self, shard: int) -> tuple[str, int] | None:
        return self.leaders.get(shard)

    def coordinators(self) -> list[str]:
        return sorted({a for a, _ in self.leaders.values()})

    def moves(self) -> dict[int, str]:
        return dict(self.handing)


def router(offices: list[FakeOffice], stores: list[MemoryStore], view: View | None = None, *,
           delay_ms: int = 0, clock: FakeClock | None = None) -> ShardRouter:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=delay_ms, group_min_session_timeout_ms=200)
    return ShardRouter.build(offices, stores, view=view or View(), config=config, clock=clock)


def join_request(group: str, member_id: str = "") -> pb.JoinGroupRequest:
    return pb.JoinGroupRequest(group_id=group, member_id=member_id, client_id="w", session_timeout_ms=10_000,
                               rebalance_timeout_ms=10_000, protocols=["round-robin"])


def join(r: ShardRouter, group: str, member_id: str = "") -> Pending:
    runtime, pending = r.for_group(group), Pending()
    runtime.submit(lambda token: runtime.model.join(join_request(group, member_id), token), pb.JoinGroupResponse,
                   pending)
    return pending


def wait_for_member_id(coordinator: pb_grpc.GroupCoordinatorStub, group: str) -> pb.JoinGroupResponse:
    """The first JoinGroup answer that hands out a member id, once the group's shard has loaded."""
    answers: list[pb.JoinGroupResponse] = []

    def loaded() -> bool:
        answers.append(coordinator.JoinGroup(join_request(group), timeout=5))
        return answers[-1].error.code != pb.COORDINATOR_LOAD_IN_PROGRESS

    wait_until(loaded, 10, f"{group}'s shard loaded")
    assert answers[-1].member_id, answers[-1]
    return answers[-1]


@pytest.fixture
def stub_of() -> Iterator[Callable[[ServerThread], tuple[pb_grpc.GroupCoordinatorStub, pb_grpc.GroupAdminStub]]]:
    channels: list[grpc.Channel] = []

    def make(server: ServerThread) -> tuple[pb_grpc.GroupCoordinatorStub, pb_grpc.GroupAdminStub]:
        channel = grpc.insecure_channel(server.address)
        channels.append(channel)
        return pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel)

    yield make
    for channel in channels:
        channel.close()


def test_groups_live_in_their_shards_runtime() -> None:
    r = router([FakeOffice(term=1), FakeOffice(term=1)], [MemoryStore(), MemoryStore()])
    for group in (IN_0, IN_1):
        first = join(r, group)
        assert first.code == pb.MEMBER_ID_REQUIRED
        assert join(r, group, first.response.member_id).code == pb.NONE
    assert set(r.runtimes[0].groups) == {IN_0} and set(r.runtimes[1].groups) == {IN_1}
    assert r.member_principal(IN_1, "nobody") is None


def test_losing_one_shard_answers_its_parked_calls_with_the_new_leader_and_leaves_the_other_alone() -> None:
    clock = FakeClock()
    offices = [FakeOffice(term=1), FakeOffice(term=1)]
    r = router(offices, [MemoryStore(), MemoryStore()], delay_ms=3_000, clock=clock)
    parked = {}
    for group in (IN_0, IN_1):
        first = join(r, group)
        parked[group] = join(r, group, first.response.member_id)  # held for the initial delay
        assert not parked[group].done
    offices[1].change(in_office=False, address="c2:9400")
    r.runtimes[1].refusal()  # what the office's watch makes the server's loop do
    assert parked[IN_1].code == pb.NOT_COORDINATOR and parked[IN_1].response.error.coordinator_hint == "c2:9400"
    assert not parked[IN_0].done and IN_0 in r.runtimes[0].groups and not r.runtimes[1].groups
    clock.advance(3.1)
    r.runtimes[0].poll_timers()
    assert parked[IN_0].code == pb.NONE


def test_a_loading_shard_answers_load_in_progress_while_the_others_serve(stub_of: Any) -> None:
    slow = GatedStore()
    offices = [FakeOffice(term=1), FakeOffice(in_office=False, term=0)]
    with ServerThread(router(offices, [MemoryStore(), slow])) as server:
        coordinator, _ = stub_of(server)
        wait_for_member_id(coordinator, IN_0)  # shard 0 has loaded: its answers below are the served ones
        slow.gate.clear()
        offices[1].change(in_office=True, term=7)  # elected: loads off the loop, stuck in the store
        assert slow.waiting.wait(10)
        loading = coordinator.JoinGroup(join_request(IN_1), timeout=5)
        assert loading.error.code == pb.COORDINATOR_LOAD_IN_PROGRESS
        assert coordinator.JoinGroup(join_request(IN_0), timeout=5).error.code == pb.MEMBER_ID_REQUIRED
        slow.gate.set()
        wait_until(lambda: coordinator.JoinGroup(join_request(IN_1), timeout=5).error.code == pb.MEMBER_ID_REQUIRED,
                   10, "shard 1 loaded")
        assert server.call(lambda: server.router.runtimes[1].last_load_s) is not None


def test_a_hand_over_is_drained_only_once_the_shards_writes_have_landed(stub_of: Any) -> None:
    slow = GatedStore()
    offices = [HandOverOffice(term=1), HandOverOffice(term=1)]
    with ServerThread(router(offices, [MemoryStore(), slow])) as server:
        coordinator, _ = stub_of(server)
        # the shard loads in the background: under load its first answers can still be LOAD_IN_PROGRESS
        first = wait_for_member_id(coordinator, IN_1)
        slow.gate.clear()
        slow.waiting.clear()
        answer = coordinator.JoinGroup.future(join_request(IN_1, first.member_id), timeout=10)  # its write waits
        assert slow.waiting.wait(10)
        offices[1].change(in_office=False, address="c2:9400")  # hand-over: out of office first
        assert answer.result().error.code == pb.NOT_COORDINATOR
        assert not offices[1].drained_event.wait(0.2), "drained with a write still in flight"
        slow.gate.set()
        assert offices[1].drained_event.wait(10)
        assert not offices[0].drained_event.is_set()
        assert server.router.runtimes[1].records() == {}


def test_find_coordinator_and_describe_cluster_answer_from_the_view(stub_of: Any) -> None:
    view = View()
    view.leaders = {0: ("c1:9400", 3)}
    view.handing = {0: "c2:9400"}
    offices = [FakeOffice(term=3), FakeOffice(in_office=False, term=0)]
    r = router(offices, [MemoryStore(), MemoryStore()], view)
    r.advertised = "c1:9400"
    with ServerThread(r) as server:
        coordinator, admin = stub_of(server)
        found = coordinator.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[IN_0, IN_1, ""]), timeout=5)
        assert [(c.address, c.shard, c.epoch, c.error.code) for c in found.coordinators] == [
            ("c1:9400", 0, 3, pb.NONE), ("", 1, 0, pb.COORDINATOR_NOT_AVAILABLE), ("", 0, 0, pb.INVALID_GROUP_ID)]
        cluster = admin.DescribeCluster(pb.DescribeClusterRequest(), timeout=5)
        assert (cluster.mode, cluster.shards) == ("sharded", 2)
        assert [(c.address, c.shards_led, c.self) for c in cluster.coordinators] == [("c1:9400", 1, True)]
        assert [(s.shard, s.leader, s.epoch, s.state, s.groups) for s in cluster.shard_infos] == [
            (0, "c1:9400", 3, pb.SHARD_UNLOADING, 0), (1, "", 0, pb.SHARD_LEADERLESS, -1)]
        assert [(m.shard, m.from_address, m.to_address) for m in cluster.moves] == [(0, "c1:9400", "c2:9400")]


def test_list_groups_covers_every_shard_this_process_leads(stub_of: Any) -> None:
    offices = [FakeOffice(term=1), FakeOffice(term=1)]
    with ServerThread(router(offices, [MemoryStore(), MemoryStore()])) as server:
        coordinator, admin = stub_of(server)
        for group in (IN_0, IN_1):
            wait_for_member_id(coordinator, group)
        assert {g.group_id for g in admin.ListGroups(pb.ListGroupsRequest(), timeout=5).groups} == {IN_0, IN_1}
        offices[0].change(in_office=False)
        wait_until(lambda: {g.group_id for g in admin.ListGroups(pb.ListGroupsRequest(), timeout=5).groups} == {IN_1},
                   10, "shard 0's groups gone from the list")


def test_inline_writer_is_kept_for_tests_and_one_thread_pool_is_shared_when_served() -> None:
    r = router([FakeOffice(), FakeOffice()], [MemoryStore(), MemoryStore()])
    assert all(isinstance(runtime.writer, InlineWriter) for runtime in r.runtimes)
    with ServerThread(r):
        assert r.runtimes[0].writer is r.runtimes[1].writer and not isinstance(r.runtimes[0].writer, InlineWriter)


def test_per_shard_gauges() -> None:
    offices = [FakeOffice(term=5), FakeOffice(in_office=False, term=0)]
    r = router(offices, [MemoryStore(), MemoryStore()])
    first = join(r, IN_0)
    join(r, IN_0, first.response.member_id)
    text = generate_latest(r.metrics.registry).decode()
    for line in ('groupcoord_shard_leader{shard="0"} 1.0', 'groupcoord_shard_leader{shard="1"} 0.0',
                 'groupcoord_shard_epoch{shard="0"} 5.0', 'groupcoord_shard_groups{shard="0"} 1.0',
                 'groupcoord_shard_members{shard="0"} 1.0', 'groupcoord_ha_role{role="active"} 1.0'):
        assert line in text, line
    assert 'groupcoord_shard_groups{shard="1"}' not in text


class FencedStore(MemoryStore):
    """A shard's store after another coordinator took the shard: every write is refused by the fence."""

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        raise FencedError("epoch moved on")


def test_a_fenced_write_unloads_only_its_own_shard() -> None:
    offices = [FakeOffice(term=1), FakeOffice(term=1)]
    fenced = FencedStore()
    r = router(offices, [MemoryStore(), fenced])
    first_0 = join(r, IN_0)
    assert join(r, IN_0, first_0.response.member_id).code == pb.NONE
    first_1 = join(r, IN_1)
    refused = join(r, IN_1, first_1.response.member_id)  # its record cannot be written: fenced
    assert refused.code == pb.NOT_COORDINATOR
    assert offices[1].stand_downs == 1 and offices[0].stand_downs == 0
    assert not r.runtimes[1].groups and IN_0 in r.runtimes[0].groups
    synced = Pending()  # the other shard's group goes on: its leader's sync is accepted and written
    runtime = r.for_group(IN_0)
    runtime.submit(lambda token: runtime.model.sync(pb.SyncGroupRequest(
        group_id=IN_0, member_id=first_0.response.member_id, generation=runtime.groups[IN_0].generation,
        protocol_name="round-robin"), token), pb.SyncGroupResponse, synced)
    assert synced.code == pb.NONE and IN_0 in runtime.records()
