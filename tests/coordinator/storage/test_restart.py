"""The coordinator process killed with SIGKILL and restarted on its SQLite store."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import psutil
import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.assignors import TaskReplica
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker import WorkerClient, WorkerConfig, WorkerState
from tests.listening import announced
from tests.worker.test_e2e_grpc import Recorder

G = "durable"
START_CPU_S = 20
"""The CPU a coordinator process may spend starting (about 1 s: importing groupcoord.cli takes 0.9 s).
Its wall time is the machine's: a start took 68 s at load ~40 beside a second copy of this test, and
importing groupcoord.cli took 15 s of wall time for 0.94 s of CPU at load 34."""
START_WALL_S = 300  # only for a child that hangs without spending CPU
WORKER_SESSION_MS = 400_000
"""Longer than any outage the test accepts (the kill's wait, 10 s, and a start of up to START_WALL_S),
less the worker's give-up margin (a tenth: 40 s): a worker that keeps heartbeating keeps its session
through every restart, however slow the machine (nothing waits for it to end). With 20 s a start at
load ~40-60 took 18.4 s from the stable group to listening, and the worker gave its tasks up and
re-joined (generation 2)."""


def serve(data_dir: Path, env: dict[str, str], port: int = 0) -> tuple[subprocess.Popen[str], str]:
    """A coordinator on ``data_dir`` and the address it listens on, once it answers. ``port`` 0: any free
    port, read from its startup line (tests/listening.py); a restart passes the port it had, as an operator's
    restart keeps its address."""
    config = data_dir.parent / "restart.toml"
    config.write_text("[coordinator]\ngroup_min_session_timeout_ms = 500\ngroup_initial_rebalance_delay_ms = 0\n")
    log = data_dir.parent / f"serve-{time.monotonic_ns()}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "--log-level", "info", "serve", "--listen", f"127.0.0.1:{port}", "--data-dir",
         str(data_dir), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"),  # noqa: SIM115 - the child's
        text=True, env=env,
    )
    deadline, child = time.monotonic() + START_WALL_S, psutil.Process(proc.pid)
    address = announced(log, proc)
    with AdminClient(address, timeout_s=1) as admin:
        while True:
            try:
                admin.list_groups()
                return proc, address
            except errors.GroupCoordError:
                assert proc.poll() is None, f"coordinator exited; see {log}"
                cpu = sum(child.cpu_times()[:2])
                assert cpu < START_CPU_S, f"coordinator did not start in {cpu:.1f} s of CPU"
                assert time.monotonic() < deadline, f"coordinator did not start in {START_WALL_S} s ({cpu:.1f} s of CPU)"
                time.sleep(0.05)


class GatedRecorder(Recorder):
    """A listener whose ``on_revoked`` waits while ``gate`` is closed: the worker then cannot re-join, so
    the join phase stays open for as long as the test needs (a's 100 ms heartbeats would otherwise end it
    before a poll of DescribeGroup sees it: under load the test once saw only the generations around it)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None:
        super().on_revoked(tasks)
        self.gate.wait(60)


@pytest.mark.slow
@pytest.mark.heavy  # coordinator and worker processes killed and started again: 15-21 s
def test_kill_9_in_stable_and_mid_rebalance_loses_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    data = tmp_path / "data"
    coordinator, address = serve(data, cli_env)
    port = int(address.rpartition(":")[2])
    worker = WorkerClient(
        WorkerConfig(group_id=G, coordinators=address, client_id="a", session_timeout_ms=WORKER_SESSION_MS,
                     heartbeat_interval_ms=100, rebalance_timeout_ms=20_000, retry_backoff_ms=20,
                     retry_backoff_max_ms=200),
        listener := GatedRecorder(),
    )
    admin = AdminClient(address, timeout_s=2)
    try:
        admin.put_tasks(G, ["t1", "t2", "t3"])
        worker.start()
        before = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 1, 30)
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
        coordinator, _ = serve(data, cli_env, port)
        after = admin.describe_group(G)
        assert after.state == pb.STABLE
        assert after.generation == before.generation
        assert [m.member.member_id for m in after.members] == [m.member.member_id for m in before.members]
        assert [list(m.assigned) for m in after.members] == [list(m.assigned) for m in before.members]
        # the worker goes on heartbeating: no rebalance
        assert worker.wait_until(lambda w: w.state is WorkerState.STABLE, 10)
        assert worker.generation == before.generation

        # mid-rebalance: a second member's JoinGroup is held when the coordinator dies (a stays in
        # on_revoked meanwhile, so the phase cannot complete before the kill)
        listener.gate.clear()
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            join = pb.JoinGroupRequest(group_id=G, client_id="b", session_timeout_ms=6000,
                                       rebalance_timeout_ms=20_000, protocols=["round-robin"])
            first = stub.JoinGroup(join, timeout=5)
            assert first.error.code == pb.MEMBER_ID_REQUIRED
            join.member_id = first.member_id
            held = stub.JoinGroup.future(join, timeout=30)
            admin.wait_for(G, lambda d: d.state == pb.PREPARING_REBALANCE and len(d.members) == 2, 10)
            coordinator.send_signal(signal.SIGKILL)
            coordinator.wait(10)
            with pytest.raises(grpc.RpcError):
                held.result()
        coordinator, _ = serve(data, cli_env, port)
        listener.gate.set()
        restarted = admin.describe_group(G)
        assert {m.member.client_id for m in restarted.members} == {"a", "b"}  # the acknowledged join is kept
        assert [t.task_id for t in restarted.tasks] == ["t1", "t2", "t3"]
        # b never comes back: the re-run rebalance removes it at the rebalance timeout (20 s, long
        # enough that a slow restart cannot complete the phase before we look), a ends with everything
        final = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 1
                               and sum(len(m.assigned) for m in d.members) == 3, 90)
        assert final.generation > before.generation
        assert worker.wait_until(lambda w: w.generation == final.generation and len(w.assigned_tasks) == 3, 10)
    finally:
        worker.close()
        admin.close()
        coordinator.terminate()
        coordinator.wait(15)


def test_corrupt_database_is_a_clear_startup_error(tmp_path: Path, cli_env: dict[str, str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "groups.db").write_bytes(b"this is not a database" * 100)
    result = subprocess.run(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
        capture_output=True, text=True, env=cli_env, timeout=60, check=False,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "groups.db" in result.stderr
    assert (data / "groups.db").read_bytes().startswith(b"this is not a database")  # left untouched
