"""A static consumer-protocol worker SIGTERMed while its first join is unanswered, and its next process
started at once, as real processes against a real coordinator on loopback (issue 34 items 4 and 7).

The coordinator steps the join (the instance id is then held by a live member) but a hook at its edge
drops that one answer, so the worker is closed not knowing whether it joined: the case the downtime
bench's static consumer rows hit about 1 run in 4 (the next process refused UNRELEASED_INSTANCE_ID, which
stops it, until the first one's session ended). The worker joins under a member id it made (Kafka's
KIP-1082) and leaves with -2 under it, on the path its join took; the next process takes the place.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import Reply
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker import WorkerConfig, WorkerState
from tests.deadlines import Deadline
from tests.processes import stop_processes
from tests.worker.member_drivers import DRIVERS

G = "static-restart"
TASKS = ["t0", "t1", "t2", "t3"]
SESSION_MS = 120_000  # without the fix the next process is refused for this long: longer than the test


class FirstJoinUnanswered:
    """Wraps the model's GroupHeartbeat step: the first join of instance ``s1`` is stepped, its answer dropped."""

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.stepped = threading.Event()
        self.member_id = ""
        self._step = runtime.model.group_heartbeat
        setattr(runtime.model, "group_heartbeat", self)  # noqa: B010 (a hook on one instance)

    def __call__(self, request: pb.GroupHeartbeatRequest, token: Any, *args: Any) -> list[Any]:
        effects = self._step(request, token, *args)
        if request.member_epoch != 0 or request.instance_id != "s1" or self.stepped.is_set():
            return effects
        answers = [e for e in effects if isinstance(e, Reply) and e.to == token]
        answer = answers[0].response if answers else None
        if isinstance(answer, pb.GroupHeartbeatResponse) and answer.error.code == pb.NONE:
            self.member_id = answer.member_id
            self.stepped.set()
            return [e for e in effects if e not in answers]  # the caller waits until it gives up
        return effects


@pytest.fixture
def hooked_server() -> Iterator[tuple[ServerThread, FirstJoinUnanswered]]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               consumer_heartbeat_interval_ms=200, consumer_assignment_interval_ms=50)
    runtime = CoordinatorRuntime(config, on_change=lambda group: group.validate())
    hook = FirstJoinUnanswered(runtime)
    with ServerThread(runtime) as running:
        yield running, hook


def worker(driver: str, address: str, name: str, out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    if driver == "cli":  # the threaded client, its calls on the Session stream
        argv = [sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "worker", "--protocol", "consumer",
                "--group", G, "--coordinator", address, "--name", name, "--instance-id", "s1",
                "--session-timeout-ms", str(SESSION_MS), "--heartbeat-interval-ms", "200"]
    else:  # the asyncio client, every call unary
        argv = [sys.executable, "-m", "tests.worker.consumer_member_proc", "--driver", "asyncio", "--unary",
                "--group", G, "--coordinator", address, "--name", name, "--instance-id", "s1",
                "--session-timeout-ms", str(SESSION_MS)]
    with (out / f"{name}.out").open("wb") as stdout, (out / f"{name}.err").open("wb") as stderr:
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, cwd=Path(__file__).resolve().parents[2])


def static_member(admin: AdminClient) -> pb.DescribedMember | None:
    members = [m for m in admin.describe_group(G).members if m.member.instance_id == "s1"]
    return members[0] if members else None


@pytest.mark.slow
@pytest.mark.heavy  # four worker processes: 18 s at load 12; make test is near its budget, CI runs make test-heavy
@pytest.mark.parametrize("driver", ["cli", "asyncio"], ids=["threaded-stream", "asyncio-unary"])
def test_a_static_worker_closed_before_its_join_was_answered_lets_its_next_process_in(
        hooked_server: tuple[ServerThread, FirstJoinUnanswered], driver: str, tmp_path: Path,
        cli_env: dict[str, str]) -> None:
    server, hook = hooked_server
    admin = AdminClient(server.address)
    admin.put_tasks(G, TASKS)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = worker(driver, server.address, "w1", tmp_path, cli_env)
        procs.append(first)
        # a process start: its imports alone took over 90 s at load 50 (tests/deadlines.py)
        started = Deadline(90)
        while not hook.stepped.wait(1):
            assert not started.passed(), "the first join never reached the coordinator"
        held = static_member(admin)
        assert held is not None and held.member.member_id == hook.member_id and not held.consumer.away
        first.send_signal(signal.SIGTERM)  # closed while its join is unanswered
        assert first.wait(60) == 0, (tmp_path / "w1.err").read_text()[-2000:]

        second = worker(driver, server.address, "w2", tmp_path, cli_env)  # its next process, at once
        procs.append(second)
        deadline = Deadline(90)
        while not deadline.passed() and second.poll() is None:
            now = static_member(admin)
            if now is not None and now.member.member_id != hook.member_id and len(now.assigned) == len(TASKS):
                break
            time.sleep(0.1)
        errors = (tmp_path / "w2.err").read_text()
        assert second.poll() is None, f"the next process stopped (rc {second.returncode}): {errors[-2000:]}"
        assert "UNRELEASED_INSTANCE_ID" not in errors
        now = static_member(admin)
        assert now is not None and now.member.member_id != hook.member_id
        assert sorted(t.task_id for t in now.assigned) == TASKS
        assert [m.member.instance_id for m in admin.describe_group(G).members] == ["s1"]
    finally:
        stop_processes(procs)
        admin.close()


class CallsSeen(grpc.aio.ServerInterceptor):
    """Counts the calls the coordinator was made, by method (a Session stream is one call)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]], details: Any) -> Any:
        self.calls[details.method.rsplit("/", 1)[-1]] += 1
        return await continuation(details)


class Quiet:
    def on_assigned(self, tasks: Any, generation: int) -> None: ...

    def on_revoked(self, tasks: Any) -> None: ...


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_static_members_leave_goes_on_the_stream_its_calls_go_on(driver: str) -> None:
    """Behind the member's calls: a join the close gave up waiting for, still on the stream, is stepped
    before the -2 (sent unary, the leave could overtake it, and that join took the instance back)."""
    seen = CallsSeen()
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               consumer_heartbeat_interval_ms=100, consumer_assignment_interval_ms=20)
    with ServerThread(CoordinatorRuntime(config), interceptors=[seen]) as server:
        admin = AdminClient(server.address)
        admin.put_tasks(G, TASKS)
        member = DRIVERS[driver](WorkerConfig(
            group_id=G, coordinators=(server.address,), client_id="w", protocol="consumer", instance_id="s1",
            session_timeout_ms=6_000, heartbeat_interval_ms=100, rebalance_timeout_ms=5_000), Quiet())
        try:
            member.start()
            assert member.wait(lambda c: c.state is WorkerState.STABLE and len(c.assigned_tasks) == 4, 30)
        finally:
            member.close()
        described = static_member(admin)
        admin.close()
    assert described is not None and described.consumer.away  # the -2 was taken
    assert seen.calls["Session"] >= 1 and seen.calls["GroupHeartbeat"] == 0, seen.calls
