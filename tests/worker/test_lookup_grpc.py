"""Both worker clients find a standalone coordinator with FindCoordinator, over real gRPC on loopback.

An unsharded coordinator answers FindCoordinator with its own address, so the one code path of
``worker.lookup`` serves it too; a worker behind a proxy stays behind it; a coordinator without
FindCoordinator (an older version, here a proxy that does not forward it) is used as before.
The sharded cases, over real processes and ZooKeeper, are in test_sharded_workers.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig
from tests.chaos.rpc_proxy import RpcProxy

G = "orders"


def config(*addresses: str, name: str = "w") -> WorkerConfig:
    return WorkerConfig(group_id=G, coordinators=addresses, client_id=name, session_timeout_ms=3000,
                        heartbeat_interval_ms=100, retry_backoff_ms=20, retry_backoff_max_ms=200)


class _Recorder:
    def on_assigned(self, tasks: Any, generation: int) -> None: ...

    def on_revoked(self, tasks: Any) -> None: ...


class _OldCoordinator(RpcProxy):
    """A coordinator of a version before FindCoordinator: the proxy answers it UNIMPLEMENTED."""

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if details.method.endswith("/FindCoordinator"):  # type: ignore[attr-defined]
            return None
        return super().service(details)


def test_a_worker_looks_its_coordinator_up_once_and_reports_it(server: ServerThread) -> None:
    AdminClient(server.address).put_tasks(G, ["t0", "t1"])
    registry = CollectorRegistry()
    dead = "127.0.0.1:1"  # first on the list: refused, the next bootstrap address answers
    worker = WorkerClient(config(dead, server.address), _Recorder(), metrics_registry=registry).start()
    try:
        assert worker.wait_until_stable(20)
        assert worker.coordinator_address == server.address
        assert worker.coordinator_lookups == 1
        labels = {"group": G, "client": "w"}
        assert registry.get_sample_value("groupcoord_worker_coordinator_lookups_total", labels) == 1
        assert registry.get_sample_value("groupcoord_worker_coordinator", {**labels, "address": server.address}) == 1
    finally:
        worker.close()


def test_a_worker_behind_a_proxy_stays_behind_it(server: ServerThread) -> None:
    with RpcProxy(server.address) as proxy:
        worker = WorkerClient(config(proxy.address), _Recorder()).start()
        try:
            assert worker.wait_until_stable(20)
            # FindCoordinator named the coordinator's own address; DescribeCluster through the proxy said
            # that is who the proxy reaches, so the worker keeps dialling the proxy
            assert worker.coordinator_address == proxy.address
        finally:
            worker.close()


def test_a_coordinator_without_find_coordinator_is_used_from_the_list(server: ServerThread) -> None:
    with _OldCoordinator(server.address) as old:
        worker = WorkerClient(config(old.address), _Recorder()).start()
        try:
            assert worker.wait_until_stable(20)
            assert worker.coordinator_address == old.address and worker.coordinator_lookups == 1
        finally:
            worker.close()


def test_the_async_client_looks_up_the_same_way(server: ServerThread) -> None:
    async def run() -> None:
        with RpcProxy(server.address) as proxy, _OldCoordinator(server.address) as old:
            clients = [AsyncWorkerClient(config("127.0.0.1:1", server.address, name="a")),
                       AsyncWorkerClient(config(proxy.address, name="b")),
                       AsyncWorkerClient(config(old.address, name="c"))]
            for client in clients:
                await client.start()
            try:
                for client in clients:
                    assert await client.wait_until_stable(20)
                assert [c.coordinator_address for c in clients] == [server.address, proxy.address, old.address]
                assert all(c.coordinator_lookups == 1 for c in clients)
            finally:
                for client in clients:
                    await client.close()

    asyncio.run(run())
