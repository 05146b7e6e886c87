"""A coordinator without the Session stream (an older one: it answers UNIMPLEMENTED): both clients fall back
to unary calls with no config, remember it for the address, and form their group as before."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.worker import WorkerConfig, WorkerState
from groupcoord.worker.stream_tags import SESSION_METHOD
from tests.worker.member_drivers import DRIVERS, Driven

G = "orders"


class WithoutSession(grpc.aio.ServerInterceptor):
    """The coordinator as a version before the stream: the Session method is not served (UNIMPLEMENTED);
    or, with ``status``, served but refused at open (a quota of streams, a credential)."""

    def __init__(self, status: grpc.StatusCode | None = None) -> None:
        self.refused = 0
        self.status = status

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        if details.method == SESSION_METHOD:
            self.refused += 1
            if self.status is None:
                return None
            status = self.status

            async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
                await context.abort(status, "too many streams for this principal")

            return grpc.stream_stream_rpc_method_handler(refuse)
        return await continuation(details)


@pytest.fixture
def older() -> Iterator[tuple[ServerThread, WithoutSession]]:
    refusing = WithoutSession()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    runtime = CoordinatorRuntime(config, on_change=lambda group: group.validate())
    with ServerThread(runtime, interceptors=[refusing]) as running:
        yield running, refusing


def worker_config(address: str, name: str, **overrides: Any) -> WorkerConfig:
    settings: dict[str, Any] = {
        "group_id": G, "coordinators": address, "client_id": name, "session_timeout_ms": 3000,
        "heartbeat_interval_ms": 100, "rebalance_timeout_ms": 5000, "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
    }
    settings.update(overrides)
    return WorkerConfig(**settings)


class Quiet:
    def on_assigned(self, tasks: object, generation: int) -> None:
        pass

    def on_revoked(self, tasks: object) -> None:
        pass


def stable_together(drivers: list[Driven]) -> bool:
    generations = {d.client.generation for d in drivers}
    return all(d.client.state is WorkerState.STABLE for d in drivers) and len(generations) == 1


def wait_stable_together(drivers: list[Driven], timeout: float) -> bool:
    """Every client Stable in one generation. Each waits on its own client: a client's waiters wake on its
    own changes only, so one waiting for a predicate on the others slept to its timeout (20 s, a pass)."""
    deadline = time.monotonic() + timeout
    while not stable_together(drivers):
        newest = max(d.client.generation for d in drivers)
        for each in drivers:
            caught_up = each.wait(lambda c, g=newest: c.state is WorkerState.STABLE and c.generation >= g,
                                  max(0.0, deadline - time.monotonic()))
            if not caught_up:
                return stable_together(drivers)
    return True


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_an_older_coordinator_gets_unary_calls_with_no_config(
        driver: str, older: tuple[ServerThread, WithoutSession], caplog: pytest.LogCaptureFixture) -> None:
    server, refusing = older
    caplog.set_level(logging.INFO, logger="groupcoord.worker")
    drivers = [DRIVERS[driver](worker_config(server.address, f"w{i}"), Quiet()) for i in range(2)]
    try:
        for each in drivers:
            each.start()
        assert wait_stable_together(drivers, 20), [d.client.state for d in drivers]
        generation = drivers[0].client.generation
        # they heartbeat on, unary: a few intervals later the group has not moved
        assert not drivers[0].wait(lambda c: c.generation != generation, 0.5)
        assert {d.client.coordinator_via for d in drivers} == {"unary"}
    finally:
        for each in drivers:
            each.close()
    told = [r for r in caplog.records if "has no Session stream" in r.getMessage()]
    assert told and all(server.address in r.getMessage() for r in told)
    # asked once, then remembered for the address in the process: the threaded clients share their stream
    # (one probe); each OnALoop client has a loop, so a stream, of its own, and both may ask at once before
    # either heard the answer
    assert refusing.refused == 1 if driver == "threaded" else 1 <= refusing.refused <= len(drivers)


def test_session_stream_off_never_asks(older: tuple[ServerThread, WithoutSession]) -> None:
    server, refusing = older
    driven = DRIVERS["threaded"](worker_config(server.address, "w-off", session_stream=False), Quiet())
    try:
        driven.start()
        assert driven.wait(lambda c: c.state is WorkerState.STABLE, 20)
        assert driven.client.coordinator_via == "unary"
    finally:
        driven.close()
    assert refusing.refused == 0


def test_a_stream_refused_at_open_leaves_the_calls_unary_and_is_asked_again_later(
        caplog: pytest.LogCaptureFixture) -> None:
    refusing = WithoutSession(grpc.StatusCode.RESOURCE_EXHAUSTED)
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    with ServerThread(CoordinatorRuntime(config), interceptors=[refusing]) as server:
        driven = DRIVERS["threaded"](worker_config(server.address, "w-refused"), Quiet())
        try:
            driven.start()
            assert driven.wait(lambda c: c.state is WorkerState.STABLE, 20)
            generation = driven.client.generation
            assert not driven.wait(lambda c: c.generation != generation, 0.5)  # heartbeats go on, unary
            assert driven.client.coordinator_via == "unary" and driven.fatal_error is None
        finally:
            driven.close()
    # not remembered as "no stream": asked again only after REFUSED_WAIT_S (30 s), not at every call
    assert refusing.refused == 1
