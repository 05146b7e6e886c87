"""A bound on a group's total metadata keeps the leader's JoinGroup answer under the message cap
(issue 38 item 3).

Before the bound, tenant B joined 68 members of 1,048,000 bytes of ``user_data`` each (each under
``max_metadata_bytes``) into a group two stock workers of tenant A ran: the leader's answer (71 MB)
could not be sent under the 64 MiB cap, the group stuck in AWAITING_SYNC and A's workers ran none
of their six tasks. Here the cap is 8 MiB (the same arithmetic, eight times lighter): the member
that would take the total past half the cap is refused with GROUP_MAX_SIZE_REACHED, and the group
settles with every task running.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Self

import grpc
import pytest

from groupcoord.admin import AdminClient
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.deadlines import keep_waiting
from tests.processes import stop_processes

G = "ab-shared"
TASKS = [f"t{i}" for i in range(6)]
CAP = 8 * 1_048_576
USER_DATA = 1_048_000
WAIT_S = 180  # two worker processes start in seconds; at load 40 on two cores they took over 60: stretched by the load


class BulkyMember:
    """A raw member of tenant B: 1,048,000 bytes of user_data; joins, syncs and heartbeats, in a thread."""

    def __init__(self, address: str, name: str) -> None:
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", CAP)])
        self.stub = pb_grpc.GroupCoordinatorStub(self.channel)
        self.name = name
        self.stop = threading.Event()
        self.refused = ""
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        member_id = ""
        while not self.stop.is_set() and not self.refused:
            try:
                member_id = self.round(member_id)
            except grpc.RpcError:
                if self.stop.wait(0.1):
                    return

    def round(self, member_id: str) -> str:
        joined = self.stub.JoinGroup(pb.JoinGroupRequest(
            group_id=G, member_id=member_id, client_id=self.name, session_timeout_ms=30_000,
            rebalance_timeout_ms=60_000, protocols=["round-robin"],
            metadata=pb.MemberMetadata(user_data=b"b" * USER_DATA)), timeout=30)
        if joined.error.code == pb.GROUP_MAX_SIZE_REACHED:
            self.refused = joined.error.message
            return member_id
        if joined.error.code == pb.MEMBER_ID_REQUIRED:
            return str(joined.member_id)
        if joined.error.code != pb.NONE:
            self.stop.wait(0.05)
            return "" if joined.error.code == pb.UNKNOWN_MEMBER_ID else member_id
        synced = self.stub.SyncGroup(pb.SyncGroupRequest(group_id=G, member_id=joined.member_id,
                                                         generation=joined.generation), timeout=30)
        while synced.error.code == pb.NONE and not self.stop.wait(0.3):
            beat = self.stub.Heartbeat(pb.HeartbeatRequest(group_id=G, member_id=joined.member_id,
                                                           generation=joined.generation), timeout=10)
            if beat.error.code != pb.NONE:
                break
        return str(joined.member_id)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(40)
        self.channel.close()


@pytest.fixture
def capped_server() -> Iterator[ServerThread]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               max_message_bytes=CAP, max_request_bytes_in_flight=CAP)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as running:
        yield running


@pytest.mark.slow
@pytest.mark.heavy  # 30 s of a 4-worker run: stock worker processes and 1 MB joins; CI runs it in make test-heavy
def test_the_member_that_would_overflow_the_leaders_answer_is_refused_and_the_group_runs(
        capped_server: ServerThread, cli_env: dict[str, str]) -> None:
    address = capped_server.address
    admin = AdminClient(address, timeout_s=10)
    admin.put_tasks(G, TASKS)
    command = [sys.executable, "-m", "groupcoord.cli", "worker", "--group", G, "--coordinator", address,
               "--session-timeout-ms", "30000", "--heartbeat-interval-ms", "500", "--rebalance-timeout-ms", "60000"]
    workers = [subprocess.Popen(command + ["--name", f"a{i}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, text=True, env=cli_env) for i in range(2)]
    bulky: list[BulkyMember] = []
    try:
        keep_waiting(lambda step: admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 2, step),
                     WAIT_S)
        bulky = [BulkyMember(address, f"b{i}").__enter__() for i in range(9)]  # 9.4 MB of metadata
        settled = keep_waiting(lambda step: admin.wait_for(
            G, lambda d: d.state == pb.STABLE and not d.unassigned and sum(len(m.assigned) for m in d.members) == 6
            and len(d.members) + sum(1 for b in bulky if b.refused) == 11, step), WAIT_S)
        refused = [b.refused for b in bulky if b.refused]
    finally:
        for member in bulky:
            member.__exit__()
        stop_processes(workers)
        admin.close()
    held = {m.member.client_id: len(m.assigned) for m in settled.members}
    assert held["a0"] >= 1 and held["a1"] >= 1, held  # A's workers run their share
    assert 3 <= len(settled.members) - 2 <= 4 and len(refused) == 11 - len(settled.members), (held, refused)
    assert "at most 4194304 (group_max_metadata_bytes" in refused[0], refused[0]
    total = sum(m.member.ByteSize() for m in settled.members)
    assert total <= CAP // 2
