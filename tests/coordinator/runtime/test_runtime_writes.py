"""The runtime's writes: off the event loop, in order per group, replies only once durable."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import grpc

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.storage.store import MemoryStore, StoreError
from groupcoord.coordinator.testing import FailingStore, Harness
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc


class GatedStore(MemoryStore):
    """A store whose writes of one group wait until the test opens the gate (a slow ZooKeeper)."""

    def __init__(self, slow_group: str) -> None:
        super().__init__()
        self.slow_group = slow_group
        self.gate = threading.Event()
        self.waiting = threading.Event()
        self.saves: list[str] = []

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        if group_id == self.slow_group:
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"
        self.saves.append(group_id)
        super().save(group_id, record)


def _join(stub: pb_grpc.GroupCoordinatorStub, group: str) -> tuple[str, int]:
    request = pb.JoinGroupRequest(group_id=group, client_id="w", session_timeout_ms=10_000,
                                  rebalance_timeout_ms=10_000, protocols=["round-robin"])
    first = stub.JoinGroup(request, timeout=5)
    request.member_id = first.member_id
    joined = stub.JoinGroup(request, timeout=5)
    assert joined.error.code == pb.NONE, joined.error
    synced = stub.SyncGroup(pb.SyncGroupRequest(group_id=group, member_id=first.member_id,
                                                generation=joined.generation), timeout=5)
    assert synced.error.code == pb.NONE, synced.error
    return first.member_id, joined.generation


def test_a_slow_write_delays_only_its_own_group() -> None:
    store = GatedStore("slow")
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    with ServerThread(CoordinatorRuntime(config, store=store)) as server, \
            grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        admin = pb_grpc.GroupAdminStub(channel)
        member, generation = _join(stub, "fast")
        put: Future[Any] = admin.PutTasks.future(pb.PutTasksRequest(group_id="slow", tasks=[pb.Task(task_id="t")]),
                                                 timeout=30)
        assert store.waiting.wait(10), "the slow group's write never started"
        # the event loop is free: another group's heartbeat and join are answered meanwhile
        beat = stub.Heartbeat(pb.HeartbeatRequest(group_id="fast", member_id=member, generation=generation),
                              timeout=5)
        assert beat.error.code == pb.NONE
        _join(stub, "fast-2")
        described: Future[Any] = admin.DescribeGroup.future(pb.DescribeGroupRequest(group_id="slow"), timeout=30)
        assert admin.DescribeGroup(pb.DescribeGroupRequest(group_id="fast"), timeout=5).state == pb.STABLE
        assert not put.done(), "PutTasks was answered before its record was stored"
        assert not described.done(), "an observer saw the slow group's change before it was durable"
        store.gate.set()
        assert put.result(timeout=10).num_tasks == 1
        assert store.load_all()["slow"]["tasks"]  # durable by the time the answer came


def test_writes_of_one_group_queue_and_the_newest_record_wins() -> None:
    """While one write is in flight, later changes of the group wait behind it as one write."""
    store = GatedStore("g")
    with ServerThread(CoordinatorRuntime(CoordinatorConfig(), store=store)) as server, \
            grpc.insecure_channel(server.address) as channel:
        admin = pb_grpc.GroupAdminStub(channel)
        first = admin.PutTasks.future(pb.PutTasksRequest(group_id="g", tasks=[pb.Task(task_id="a")]), timeout=30)
        assert store.waiting.wait(10)
        later = [admin.PutTasks.future(pb.PutTasksRequest(group_id="g", tasks=[pb.Task(task_id=t)]), timeout=30)
                 for t in ("b", "c", "d")]
        while server.call(server.runtime.waiting) < 4:  # the three requests reach the loop ...
            assert not any(f.done() for f in [first, *later])
        assert not any(f.done() for f in [first, *later])  # ... and all wait for the first write
        store.gate.set()
        assert [f.result(timeout=10).num_tasks for f in [first, *later]] == [1, 2, 3, 4]
        assert store.saves.count("g") <= 3  # the queued changes were written together, not one by one
        assert len(store.load_all()["g"]["tasks"]) == 4


class _FailSecond(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def save(self, group_id: str, record: Mapping[str, Any]) -> None:
        self.calls += 1
        if self.calls == 2:
            raise StoreError("disk full")
        super().save(group_id, record)


def test_a_failed_write_fails_every_reply_queued_behind_it_and_rolls_back() -> None:
    store = _FailSecond()
    h = Harness(store=store)
    assert h.put_tasks("g", "a") == pb.NONE  # write 1: stored
    assert h.put_tasks("g", "b") == pb.COORDINATOR_NOT_AVAILABLE  # write 2 fails
    assert sorted(h.group("g").tasks) == ["a"]  # as last stored
    assert sorted(h.runtime.records()["g"]["tasks"]) == sorted(store.load_all()["g"]["tasks"])
    assert h.put_tasks("g", "b") == pb.NONE


def test_a_fenced_write_unloads_and_tells_the_office() -> None:
    from groupcoord.coordinator.storage.store import FencedError
    from groupcoord.coordinator.testing import FakeOffice

    class Fenced(MemoryStore):
        def save(self, group_id: str, record: Mapping[str, Any]) -> None:
            raise FencedError("another coordinator holds a newer epoch")

    office = FakeOffice()
    h = Harness(store=Fenced(), office=office)
    h.runtime.load()
    assert h.put_tasks("g", "a") == pb.NOT_COORDINATOR
    assert h.model.groups == {} and office.stand_downs == 1


def test_failing_store_double_is_a_real_store_at_the_edge() -> None:
    store = FailingStore(MemoryStore())
    store.fail_next_save()
    h = Harness(store=store)
    assert h.put_tasks("g", "a") == pb.COORDINATOR_NOT_AVAILABLE and store.failures == 1


def test_stopping_answers_parked_calls_and_ends_within_its_grace() -> None:
    import time

    server = ServerThread(CoordinatorRuntime(CoordinatorConfig(group_initial_rebalance_delay_ms=0))).start()
    channel = grpc.insecure_channel(server.address)
    try:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        _join(stub, "g")  # a Stable member that will not re-join
        second = pb.JoinGroupRequest(group_id="g", client_id="b", session_timeout_ms=10_000,
                                     rebalance_timeout_ms=60_000, protocols=["round-robin"])
        first = stub.JoinGroup(second, timeout=5)
        second.member_id = first.member_id
        parked: Future[Any] = stub.JoinGroup.future(second, timeout=60)  # held: the first member must re-join
        while server.call(server.runtime.waiting) < 1:
            assert not parked.done()
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 5
        assert parked.result(timeout=5).error.code == pb.COORDINATOR_NOT_AVAILABLE
    finally:
        channel.close()
        server.stop()
