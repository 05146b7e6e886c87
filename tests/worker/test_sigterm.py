"""SIGTERM leaves the group: a child process running the documented service pattern (``run_until_signal``)
is stopped as a container is, and the coordinator sees the LeaveGroup at once (its session is 60 s); a
member beside it gets its task in the rebalance that follows. And ``wait_until_stable`` returns False on
a timeout, in both clients, without raising."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig
from tests.worker.member_drivers import DRIVERS

CHILD = Path(__file__).with_name("sigterm_member.py")


class _Quiet:
    def on_assigned(self, tasks: object, generation: int) -> None:
        pass

    def on_revoked(self, tasks: object) -> None:
        pass


@pytest.mark.parametrize("kind", sorted(DRIVERS))
def test_sigterm_makes_the_member_leave_and_the_group_rebalance_at_once(
        kind: str, server: ServerThread, cli_env: dict[str, str]) -> None:
    admin = AdminClient(server.address)
    admin.put_tasks("svc", ["t0", "t1"])
    child = subprocess.Popen([sys.executable, str(CHILD), kind, server.address], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=cli_env)
    stay = WorkerClient(WorkerConfig(group_id="svc", coordinators=(server.address,), client_id="stay",
                                     session_timeout_ms=60_000, heartbeat_interval_ms=100), _Quiet())
    try:
        assert child.stdout is not None
        first = child.stdout.readline().split()
        assert first[:1] == ["stable"], first
        stay.start()
        both = admin.wait_for("svc", lambda d: len(d.members) == 2 and d.state == pb.STABLE, 30)
        child.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        after = admin.wait_for("svc", lambda d: [m.member.client_id for m in d.members] == ["stay"]
                               and d.generation > both.generation and len(d.members[0].assigned) == 2, 20)
        took = time.monotonic() - sent
        assert took < 20 and after.generation > both.generation  # the 60 s session never came into it
        assert child.wait(20) == 0
        assert child.stdout.readline().split() == ["left", str(int(signal.SIGTERM))]
        assert stay.wait_until(lambda w: len(w.assigned_tasks) == 2, 10)  # the child's task moved to it
    finally:
        stay.close()
        if child.poll() is None:
            child.kill()
        child.wait(10)


def unanswered() -> WorkerConfig:
    # a port nothing listens on: the worker keeps trying, never Stable
    return WorkerConfig(group_id="g", coordinators=("127.0.0.1:9",), client_id="w", retry_backoff_ms=20,
                        retry_backoff_max_ms=100, request_timeout_ms=1000)


def test_wait_until_stable_returns_false_on_a_timeout_and_does_not_raise() -> None:
    client = WorkerClient(unanswered(), _Quiet()).start()
    try:
        began = time.monotonic()
        assert client.wait_until_stable(0.5) is False
        assert 0.4 <= time.monotonic() - began < 5 and client.fatal_error is None
    finally:
        client.close()

    async def on_a_loop() -> None:
        async with AsyncWorkerClient(unanswered(), _Quiet()) as aio:
            began = time.monotonic()
            assert await aio.wait_until_stable(0.5) is False
            assert 0.4 <= time.monotonic() - began < 5 and aio.fatal_error is None

    asyncio.run(on_a_loop())
