"""Run a coordinator runtime behind a gRPC server.

``start_server`` is the factory (returns the server and its bound port; bind
port 0 in tests). ``ServerThread`` runs one on a private event loop in a
background thread, for tests, benchmarks and the demo; ``serve_forever`` is
what ``groupcoord serve`` runs in the foreground.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from groupcoord.coordinator.auth.guard import Guard
from groupcoord.coordinator.rpc.bounded import HEALTH_REQUEST_MAX_BYTES, bounded_handlers
from groupcoord.coordinator.rpc.parsing import ParsingInterceptor
from groupcoord.coordinator.rpc.service import AdminServicer, CoordinatorServicer, add_servicer
from groupcoord.coordinator.rpc.session_registry import SessionRegistry
from groupcoord.coordinator.rpc.session_stream import session_service
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["RunningServer", "start_server", "ServerThread", "serve_forever"]

log = logging.getLogger("groupcoord.server")
T = TypeVar("T")


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    router: ShardRouter
    health: health.aio.HealthServicer
    timer_tasks: list[asyncio.Task[None]]
    sessions: SessionRegistry | None = None  # the Session streams (issue 35)

    @property
    def runtime(self) -> CoordinatorRuntime:
        """The first shard's runtime (the only one, unsharded)."""
        return self.router.runtimes[0]

    async def stop(self, grace_s: float = 1.0) -> None:
        """Graceful and bounded: no timer fires any more, health says NOT_SERVING, parked calls are
        answered (COORDINATOR_NOT_AVAILABLE: rediscover and retry), writes in flight land and their
        answers go out, then the server stops within ``grace_s``."""
        for task in self.timer_tasks:
            task.cancel()
        await asyncio.gather(*self.timer_tasks, return_exceptions=True)  # let them finish cancelling first
        await self.router.lag.stop()
        await self.health.enter_graceful_shutdown()
        self.router.release_parked()
        if self.sessions is not None:
            await asyncio.sleep(0)  # released answers reach their streams' queues ...
            self.sessions.stop()  # ... then CoordinatorMoved, and the streams end
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.router.checkers.close)
        await loop.run_in_executor(None, self.router.close_writers)  # writes in flight land ...
        await asyncio.sleep(0)  # ... and their answers (queued on this loop) go out
        await self.server.stop(grace_s)


async def _drive_timers(runtime: CoordinatorRuntime) -> None:
    """Fire the runtime's timers at their deadlines; wake early when one is scheduled."""
    wake = asyncio.Event()
    runtime.timers.on_schedule = wake.set
    clock = runtime.clock
    while True:
        in_office = False
        try:
            in_office = runtime.refusal() is None  # no timer fires once our term is over (e.g. after a pause)
            if in_office:
                runtime.timers.poll()
        except Exception:  # a bug in one timer must not stop every other group's timers
            log.exception("timer callback failed")
        deadline = runtime.timers.next_deadline() if in_office else None  # out of office: wait to be woken
        wake.clear()
        timeout = None if deadline is None else max(0.0, deadline - clock.now())
        try:
            # not ``wait_for``: on Python 3.11 it can swallow this task's cancellation when the event
            # is set at the same moment (CPython gh-86296), and ``stop`` would then wait forever
            async with asyncio.timeout(timeout):
                await wake.wait()
        except TimeoutError:
            pass


async def start_server(
    runtime: CoordinatorRuntime | ShardRouter,
    listen: str = "127.0.0.1:0",
    *,
    credentials: grpc.ServerCredentials | None = None,
    interceptors: list[grpc.aio.ServerInterceptor] | None = None,
) -> RunningServer:
    """Start serving ``runtime`` (or every shard's, sharded) on ``listen`` (host:port; port 0 picks a free one)."""
    router = runtime if isinstance(runtime, ShardRouter) else ShardRouter([runtime])
    limit = router.config.max_message_bytes
    probe = router.config.http2_bdp_probe
    if probe == "auto":  # off where callers may be refused for want of a token (see CoordinatorConfig)
        tokens = any(isinstance(i, Guard) and i.policy.tokens is not None for i in interceptors or ())
        probe = "off" if tokens else "on"
    # requests are parsed before anyone looks (``coordinator.rpc.parsing``): by the handlers
    # themselves when nothing else intercepts (no interceptor on the heartbeat path), else by an
    # interceptor first in the chain
    inline = not interceptors
    guard = next((i for i in interceptors or () if isinstance(i, Guard)), None)
    if guard is not None:  # the server's bounds, whoever built the guard
        guard.max_id_length = router.config.max_id_length
        guard.refusal_delay_s = router.config.failed_request_delay_ms / 1000
    server = grpc.aio.server(
        interceptors=[] if inline else [ParsingInterceptor(router, guard), *(interceptors or ())],
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
            ("grpc.http2.bdp_probe", int(probe == "on")),
            # queue calls rather than drop them at random under overload (see CoordinatorConfig)
            ("grpc.server.max_pending_requests", router.config.max_pending_requests),
            ("grpc.server.max_pending_requests_hard_limit", 2 * router.config.max_pending_requests),
        ],
    )
    coordinator = CoordinatorServicer(router)
    add_servicer(server, "GroupCoordinator", coordinator, router if inline else None)
    sessions = SessionRegistry(router)
    server.add_generic_rpc_handlers((session_service(router, coordinator, guard, sessions),))
    add_servicer(server, "GroupAdmin", AdminServicer(router), router if inline else None)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, _GenericOnly(
        server, HEALTH_REQUEST_MAX_BYTES, router.config.failed_request_delay_ms / 1000))
    names = [
        pb.DESCRIPTOR.services_by_name["GroupCoordinator"].full_name,
        pb.DESCRIPTOR.services_by_name["GroupAdmin"].full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    ]
    reflection.enable_server_reflection(names, server)
    if credentials is not None:
        port = server.add_secure_port(listen, credentials)
    else:
        port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    # FindCoordinator answers it; ``groupcoord serve`` sets the advertised one
    router.advertised = router.runtimes[0].advertised or f"{_host_of(listen)}:{port}"
    loop = asyncio.get_running_loop()
    router.attach(loop)
    await server.start()
    for name in ("", *names[:2]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    timer_tasks = []
    for each in router.runtimes:
        timer_tasks.append(loop.create_task(_drive_timers(each)))
        each.office.watch(lambda each=each: loop.call_soon_threadsafe(each.timers.on_schedule))  # type: ignore[misc]
    timer_tasks.append(loop.create_task(sessions.sweep_forever()))
    log.info("coordinator listening on %s (port %d)", listen, port)
    return RunningServer(server, port, router, health_servicer, timer_tasks, sessions)


class _GenericOnly:
    """The server as a generated ``add_*Servicer_to_server`` sees it: its handlers are added as generic
    ones only, as ours are (``service.add_servicer``). gRPC Python's server pays for every method
    registered with ``add_registered_method_handlers`` on every call, whichever method is called: each
    of health's three added some 5,000 instructions to a heartbeat, a tenth of the whole cost of our
    handling of it (``benchmarks/heartbeat_instructions.py``). Each request is bounded to
    ``max_request_bytes`` before it is decoded (``bounded_handlers``)."""

    def __init__(self, server: grpc.aio.Server, max_request_bytes: int, refusal_delay_s: float) -> None:
        self._server = server
        self._max = max_request_bytes
        self._delay_s = refusal_delay_s

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(tuple(bounded_handlers(h, self._max, self._delay_s) for h in handlers))

    def add_registered_method_handlers(self, service_name: str, handlers: Any) -> None:
        """Not registered: the generic handler the same function added answers these methods."""


def _host_of(listen: str) -> str:
    """The host a client can reach a server listening on ``listen`` at (a wildcard: this machine's loopback)."""
    host = listen.rpartition(":")[0]
    return "127.0.0.1" if host in ("", "0.0.0.0", "[::]", "::") else host


class ServerThread:
    """A coordinator server on its own event loop thread.

    ``call(fn)`` runs ``fn`` on that loop (the only thread that may touch the
    model) and returns its result, so tests can inspect groups safely.
    """

    def __init__(
        self, runtime: CoordinatorRuntime | ShardRouter | None = None, listen: str = "127.0.0.1:0", *,
        credentials: grpc.ServerCredentials | None = None,
        interceptors: list[grpc.aio.ServerInterceptor] | None = None,
    ) -> None:
        runtime = runtime or CoordinatorRuntime()
        self.router = runtime if isinstance(runtime, ShardRouter) else ShardRouter([runtime])
        self.runtime = self.router.runtimes[0]  # the only one, unsharded
        self._listen = listen
        self._credentials = credentials
        self._interceptors = interceptors
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="groupcoord-server", daemon=True)
        self._running: RunningServer | None = None

    def start(self) -> Self:
        self._thread.start()
        started = start_server(self.router, self._listen, credentials=self._credentials,
                               interceptors=self._interceptors)
        self._running = self._submit(started).result(timeout=30)
        return self

    @property
    def port(self) -> int:
        assert self._running is not None, "server not started"
        return self._running.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sessions(self) -> SessionRegistry:
        """The server's Session streams (call its methods through ``call``: they belong to the loop)."""
        assert self._running is not None and self._running.sessions is not None, "server not started"
        return self._running.sessions

    def _submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, fn: Callable[[], T], timeout: float = 30) -> T:
        async def run() -> T:
            return fn()

        result: T = self._submit(run()).result(timeout=timeout)
        return result

    def stop(self) -> None:
        if self._running is not None:
            self._submit(self._running.stop(0.5)).result(timeout=30)
            self._running = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_closed() and not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def serve_forever(
    runtime: CoordinatorRuntime | ShardRouter, listen: str, *, on_started: Callable[[RunningServer], None] | None = None,
    credentials: grpc.ServerCredentials | None = None, interceptors: list[grpc.aio.ServerInterceptor] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM, then shut down gracefully."""
    running = await start_server(runtime, listen, credentials=credentials, interceptors=interceptors)
    if on_started is not None:
        on_started(running)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await running.stop(2.0)
