"""A flood of first joins cannot keep a real member out (issue 38 item 5).

Security off, so pending member ids are shared by client address, and the flood comes from the
real worker's own address (one host, or one NAT). Before: the flood's 1,100 first joins asked for
30-minute sessions, their ids lived that long, the address's share (200) stayed full and the real
worker got COORDINATOR_NOT_AVAILABLE for as long (60 s and again 30 s in the report). Now an id
lives at most ``group_pending_member_timeout_ms`` and a new one pushes out its asker's oldest, so
the worker gets its id at its first try; its generation forms once the flood's ids (which the join
phase waits for, as Kafka's does for pending members) expire: within that bound (5 s here).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.processes import stop_processes

G = "flooded"
TASKS = ["t0", "t1", "t2"]
BOUND_S = 5


@pytest.fixture
def server() -> Iterator[ServerThread]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               group_pending_member_timeout_ms=BOUND_S * 1000)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as running:
        yield running


@pytest.mark.slow
def test_a_worker_behind_the_flooders_address_joins_past_a_flood_of_first_joins(
        server: ServerThread, cli_env: dict[str, str]) -> None:
    admin = AdminClient(server.address, timeout_s=10)
    admin.put_tasks(G, TASKS)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        flood = pb.JoinGroupRequest(group_id=G, client_id="flood", session_timeout_ms=1_800_000,
                                    rebalance_timeout_ms=10_000, protocols=["round-robin"])
        codes = [stub.JoinGroup(flood, timeout=30).error.code for _ in range(1_100)]
    assert set(codes) == {pb.MEMBER_ID_REQUIRED}, {pb.ErrorCode.Name(c) for c in codes}
    command = [sys.executable, "-m", "groupcoord.cli", "worker", "--group", G, "--coordinator", server.address,
               "--name", "real", "--session-timeout-ms", "10000", "--heartbeat-interval-ms", "500"]
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cli_env)
    started = time.monotonic()
    try:
        # the flood asked for 30 minutes: its ids hold the join phase for the bound, not for that
        joined = admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 1
                                and len(d.members[0].assigned) == 3, BOUND_S + 40)
        took = time.monotonic() - started
    finally:
        stop_processes([worker])
        admin.close()
    assert worker.stderr is not None
    log = worker.stderr.read()
    assert "COORDINATOR_NOT_AVAILABLE" not in log, log[-2000:]
    assert joined.members[0].member.client_id == "real", took
    print(f"the real worker ran its tasks {took:.1f} s after the flood (bound {BOUND_S} s)")
