"""Both worker clients over the coordinator's Session stream, real coordinator on loopback: one group from a
mixed fleet (threaded and asyncio on streams, a unary member), a cut stream that reconnects and resyncs at
the same generation, and a pushed rebalance that makes a member join long before its next heartbeat."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState
from groupcoord.worker.stream import shared_streams
from groupcoord.worker.stream_tags import SESSION_METHOD
from tests.chaos.proxy import FaultProxy
from tests.worker.member_drivers import DRIVERS, Driven

G = "orders"


class CountSessions(grpc.aio.ServerInterceptor):
    """Counts the Session calls the coordinator gets (the probe and each stream), serving them all."""

    def __init__(self) -> None:
        self.calls = 0

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        if details.method == SESSION_METHOD:
            self.calls += 1
        return await continuation(details)


class Events:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int]] = []

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None:
        with self.lock:
            self.seen.append(("assigned", generation))

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        with self.lock:
            self.seen.append(("revoked", -1))


@pytest.fixture
def coordinator() -> Iterator[tuple[ServerThread, CountSessions]]:
    counting = CountSessions()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate()),
                      interceptors=[counting]) as running:
        yield running, counting


def worker_config(address: str, name: str, **overrides: Any) -> WorkerConfig:
    settings: dict[str, Any] = {
        "group_id": G, "coordinators": address, "client_id": name, "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000, "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
    }
    settings.update(overrides)
    return WorkerConfig(**settings)


def stable_together(drivers: Sequence[Driven], generation_at_least: int = 1) -> bool:
    generations = {d.client.generation for d in drivers}
    return (all(d.client.state is WorkerState.STABLE for d in drivers) and len(generations) == 1
            and min(generations) >= generation_at_least)


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_mixed_fleet_of_stream_and_unary_members_forms_one_group(
        coordinator: tuple[ServerThread, CountSessions]) -> None:
    server, sessions = coordinator
    fleet = [
        DRIVERS["threaded"](worker_config(server.address, "thread-1"), Events()),
        DRIVERS["threaded"](worker_config(server.address, "thread-2"), Events()),
        DRIVERS["asyncio"](worker_config(server.address, "loop-1"), Events()),
        DRIVERS["threaded"](worker_config(server.address, "unary-1", session_stream=False), Events()),
    ]
    try:
        for member in fleet:
            member.start()
        assert wait_for(lambda: stable_together(fleet), 30), [(m.client.state, m.client.generation) for m in fleet]
        generation = fleet[0].client.generation
        assert [m.client.coordinator_via for m in fleet] == ["stream", "stream", "stream", "unary"]
        # heartbeats go on over both: a few intervals later nobody rejoined
        assert not wait_for(lambda: any(m.client.generation != generation for m in fleet), 0.6)
        assert stable_together(fleet)
        with AdminClient(server.address) as admin:
            assert len(admin.describe_group(G).members) == 4
    finally:
        for member in fleet:
            member.close()
    # the two threaded clients shared one stream (a probe and one stream), the asyncio one had its own
    assert sessions.calls == 4, sessions.calls


def test_members_past_the_streams_bound_go_on_over_unary_calls() -> None:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               session_max_members=1)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as server:
        fleet = [DRIVERS["threaded"](worker_config(server.address, f"thread-{n}"), Events()) for n in (1, 2)]
        try:
            for member in fleet:
                member.start()
            assert wait_for(lambda: stable_together(fleet), 30), [(m.client.state, m.client.generation) for m in fleet]
            generation = fleet[0].client.generation
            assert not wait_for(lambda: any(m.client.generation != generation for m in fleet), 0.6)  # heartbeats pass
            with AdminClient(server.address) as admin:
                assert len(admin.describe_group(G).members) == 2
            assert server.call(server.sessions.members) == 1  # the stream carries one; the other went unary
        finally:
            for member in fleet:
                member.close()


def test_the_stream_metric_and_property_say_stream(coordinator: tuple[ServerThread, CountSessions]) -> None:
    server, _ = coordinator
    registry = CollectorRegistry()
    client = WorkerClient(worker_config(server.address, "metered"), Events(), metrics_registry=registry)
    with client:
        assert client.wait_until_stable(20)
        labels = {"group": G, "client": "metered"}
        assert registry.get_sample_value("groupcoord_worker_session_stream", labels) == 1
        assert client.coordinator_via == "stream"


def test_a_cut_stream_reconnects_and_resyncs_at_the_same_generation(
        coordinator: tuple[ServerThread, CountSessions], caplog: pytest.LogCaptureFixture) -> None:
    server, _ = coordinator
    caplog.set_level(logging.INFO, logger="groupcoord.worker")
    with FaultProxy(server.port) as proxy:
        events = Events()
        client = WorkerClient(worker_config(proxy.address, "cut", heartbeat_interval_ms=200), events)
        with client:
            assert client.wait_until_stable(20)
            generation = client.generation
            assert client.coordinator_via == "stream"
            stream = client._transport.streams._stream
            assert stream is not None and stream.opened == 1
            proxy.drop()  # every connection closed: the stream breaks mid-group
            assert wait_for(lambda: "broke" in caplog.text, 10)
            proxy.heal()
            assert wait_for(lambda: stream.opened >= 2 and client.coordinator_via == "stream", 15), stream.opened
            assert wait_for(lambda: "resync" in caplog.text, 10)
            # a resync, not a rejoin: same generation, tasks never revoked
            assert client.state is WorkerState.STABLE and client.generation == generation
            assert ("revoked", -1) not in events.seen
    assert len(shared_streams.registry) == 0 or all(
        key[0] != proxy.address for key in shared_streams.registry._streams)


def test_a_pushed_rebalance_makes_the_member_join_before_its_heartbeat(
        coordinator: tuple[ServerThread, CountSessions]) -> None:
    server, _ = coordinator
    slow = {"heartbeat_interval_ms": 20_000, "session_timeout_ms": 60_000, "rebalance_timeout_ms": 60_000}
    first = WorkerClient(worker_config(server.address, "slow-heartbeat", **slow), Events())
    second = WorkerClient(worker_config(server.address, "newcomer", **slow), Events())
    with first:
        assert first.wait_until_stable(20)
        assert first.coordinator_via == "stream"
        generation = first.generation
        started = time.monotonic()
        with second:
            # without the push, ``first`` would hear of the rebalance at its next heartbeat, 20 s from now
            both = wait_for(lambda: first.generation > generation and second.state is WorkerState.STABLE
                            and first.state is WorkerState.STABLE, 10)
            took = time.monotonic() - started
            assert both, (first.state, first.generation, second.state)
            assert took < 10, took  # half the heartbeat interval, whatever the load


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_consumer_newcomer_runs_its_tasks_without_waiting_a_heartbeat_interval(driver: str) -> None:
    """Issue 34's 0.5 s, over a real stream: the newcomer hears its first target although its join had no
    member id yet, the member giving tasks up hears it and heartbeats once they are stopped, and the
    newcomer hears the moment they are let go. Any of the three waiting for a heartbeat instead would take
    20 s here (the coordinator's interval)."""
    config = CoordinatorConfig(consumer_heartbeat_interval_ms=20_000, consumer_session_timeout_ms=60_000,
                               consumer_assignment_interval_ms=20)
    slow = {"protocol": "consumer", "heartbeat_interval_ms": 20_000, "session_timeout_ms": 60_000,
            "rebalance_timeout_ms": 60_000}
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as server:
        AdminClient(server.address).put_tasks(G, ["t0", "t1", "t2", "t3"])
        first = DRIVERS[driver](worker_config(server.address, "first", **slow), Events())
        newcomer = DRIVERS[driver](worker_config(server.address, "newcomer", **slow), Events())
        try:
            first.start()
            assert first.wait(lambda c: c.state is WorkerState.STABLE and len(c.assigned_tasks) == 4, 20)
            assert first.client.coordinator_via == "stream"
            started = time.monotonic()
            newcomer.start()
            both = newcomer.wait(lambda c: len(c.assigned_tasks) == 2, 10)
            took = time.monotonic() - started
            assert both, (newcomer.client.state, newcomer.client.assigned_tasks, first.client.assigned_tasks)
            assert took < 10, took  # half the heartbeat interval, whatever the load
            assert len(first.client.assigned_tasks) == 2
            assert not set(first.client.assigned_tasks) & set(newcomer.client.assigned_tasks)
        finally:
            for member in (newcomer, first):
                member.close()
