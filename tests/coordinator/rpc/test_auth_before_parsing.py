"""Authentication comes from the call's metadata before its body is decoded (issue 26 item 2).

Before, the parsing interceptor decoded every request first and the guard refused it after: four
senders of 24 MiB PutTasks with no token took a coordinator from 91 MiB to 3.6 GiB and an admin's
PutTasks from 0.08 s to 1.2 s, every one of them answered UNAUTHENTICATED.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import psutil
import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity, channel_options
from groupcoord.coordinator.auth.guard import Guard, Policy
from groupcoord.coordinator.auth.tokens import parse_tokens
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.deadlines import Deadline
from tests.listening import announced
from tests.processes import stop_processes
from tests.security_pki import Tokens

PUT_TASKS = "/groupcoord.v1.GroupAdmin/PutTasks"


def test_a_call_without_a_token_is_refused_before_its_body_is_read(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path)
    token = tokens.new("admin")
    policy = Policy(tokens=parse_tokens(tokens.server_file().read_text()))
    runtime = CoordinatorRuntime()
    with ServerThread(runtime, interceptors=[Guard(policy, owner_of=runtime.model.member_principal)]) as server:
        with grpc.insecure_channel(server.address, options=channel_options()) as channel:
            put = channel.unary_unary(PUT_TASKS)
            for body in (b"\xff not protobuf", flood_body(8)):
                with pytest.raises(grpc.RpcError) as refused:
                    put(body, timeout=30)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "no credentials" in (refused.value.details() or "")
            with pytest.raises(grpc.RpcError) as refused:
                put(flood_body(1), timeout=30, metadata=[("authorization", "Bearer wrong")])
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with AdminClient(server.address, security=ClientSecurity(token_file=str(token))) as admin:
            assert admin.put_tasks("g", ["t1"]) >= 0  # the same call with a token goes through
        assert runtime.large_requests.held == 0


def flood_body(megabytes: int) -> bytes:
    """A PutTasks of many small tasks (the costly kind to decode), ``megabytes`` MiB."""
    task = pb.Task(task_id="x" * 60, pool="p", weight=1.0).SerializeToString()
    entry = b"\x12" + bytes([len(task)]) + task  # field 2 (tasks), length-delimited
    head = pb.PutTasksRequest(group_id="victim").SerializeToString()
    return head + entry * (megabytes * 1_048_576 // len(entry))


@pytest.mark.slow
@pytest.mark.heavy  # 24 MiB bodies by the dozen: 14 s of CPU
def test_an_unauthenticated_flood_of_24_mib_bodies_costs_no_memory_and_no_admin_latency(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    tokens = Tokens(tmp_path)
    admin_token = tokens.new("admin")
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
         "--token-file", str(tokens.server_file())],
        env=cli_env, stdout=subprocess.DEVNULL, stderr=open(log, "w"), text=True)  # noqa: SIM115 - the child's
    try:
        address = announced(log, proc)
        admin = AdminClient(address, timeout_s=30, security=ClientSecurity(token_file=str(admin_token)))
        deadline = Deadline(60)  # an interpreter's imports: slower the more the machine is shared
        while True:
            try:
                admin.list_groups()
                break
            except errors.GroupCoordError:
                assert proc.poll() is None and not deadline.passed(), "coordinator did not start"
                time.sleep(0.1)  # polling for the coordinator to listen
        coordinator = psutil.Process(proc.pid)
        catalog = [f"task-{i}" for i in range(200)]

        def admin_put_s() -> float:
            started = time.perf_counter()
            admin.put_tasks("victim", catalog)
            return time.perf_counter() - started

        baseline_latency = sorted(admin_put_s() for _ in range(10))[5]
        baseline_rss = coordinator.memory_info().rss
        body = flood_body(24)
        stop = threading.Event()
        answers: list[grpc.StatusCode] = []

        def flood() -> None:
            with grpc.insecure_channel(address, options=channel_options()) as channel:
                put = channel.unary_unary(PUT_TASKS)  # raw bytes, no credential
                while not stop.is_set():
                    try:
                        put(body, timeout=30)
                    except grpc.RpcError as error:
                        answers.append(error.code())

        senders = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
        for sender in senders:
            sender.start()
        peak, latencies = baseline_rss, []
        until = time.monotonic() + 10
        while time.monotonic() < until:
            latencies.append(admin_put_s())
            peak = max(peak, coordinator.memory_info().rss)
        stop.set()
        for sender in senders:
            sender.join(60)
        flood_latency = sorted(latencies)[len(latencies) // 2]
        mib = 1_048_576
        print(f"\nunauthenticated flood: {len(answers)} refusals; coordinator RSS {baseline_rss // mib} -> peak "
              f"{peak // mib} MiB; admin PutTasks median {baseline_latency * 1000:.1f} ms -> "
              f"{flood_latency * 1000:.1f} ms", file=sys.stderr)
        assert answers and set(answers) == {grpc.StatusCode.UNAUTHENTICATED}
        # four 24 MiB bodies in flight are received (their bytes), never decoded (about 5x as much)
        assert peak - baseline_rss < 300 * mib, f"RSS {baseline_rss // mib} -> {peak // mib} MiB"
        admin.close()
    finally:
        stop_processes([proc])
