"""A client that stops reading its Session stream is cut off, and the coordinator's memory stays bounded:
against a real coordinator process (``groupcoord serve``), measured by its RSS and its own buffered-bytes peak.

The client asks for far more than the bound: a member holding 20,000 tasks sends 400 late SyncGroups, each
answered with its whole assignment (some 300 KB), about 120 MB of answers in all, and reads none of them.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import psutil
import pytest

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.deadlines import Deadline
from tests.listening import METRICS_LINE, announced

BOUND = 1_048_576  # session_max_buffered_bytes
TASKS = 20_000
ASKS = 400


def _serve(tmp_path: Path) -> subprocess.Popen[str]:
    """The coordinator, its gRPC and metrics ports any free ones (read from its log: tests/listening.py)."""
    config = tmp_path / "serve.toml"
    config.write_text('[server]\nmetrics_listen = "127.0.0.1:0"\n\n[coordinator]\n'
                      f"group_initial_rebalance_delay_ms = 0\nsession_max_buffered_bytes = {BOUND}\n")
    return subprocess.Popen(
        [sys.executable, "-m", "groupcoord.cli", "serve", "--listen", "127.0.0.1:0", "--store", "memory",
         "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.log", "w"), text=True)  # the child's


def _metric(metrics: str, name: str) -> float:
    text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def _stable_member(channel: grpc.Channel) -> pb.JoinGroupResponse:
    admin, member = pb_grpc.GroupAdminStub(channel), pb_grpc.GroupCoordinatorStub(channel)
    tasks = [pb.Task(task_id=f"task-{i:06d}") for i in range(TASKS)]
    assert admin.PutTasks(pb.PutTasksRequest(group_id="g", tasks=tasks), timeout=60).error.code == pb.NONE
    request = pb.JoinGroupRequest(group_id="g", client_id="w", session_timeout_ms=60_000, rebalance_timeout_ms=60_000,
                                  protocols=["round-robin"])
    request.member_id = member.JoinGroup(request, timeout=30).member_id
    joined: pb.JoinGroupResponse = member.JoinGroup(request, timeout=30)
    synced = member.SyncGroup(pb.SyncGroupRequest(
        group_id="g", member_id=joined.member_id, generation=joined.generation, protocol_name="round-robin",
        assignments=[pb.MemberAssignment(member_id=joined.member_id,
                                         tasks=[pb.TaskReplica(task_id=t.task_id) for t in tasks])]), timeout=60)
    assert synced.error.code == pb.NONE and len(synced.tasks) == TASKS
    return joined


@pytest.mark.slow
@pytest.mark.heavy  # a serve child holding 20,000 tasks measured for memory (as the 21 MiB floods): 14-33 s; CI runs it in make test-heavy
def test_a_client_that_stops_reading_is_cut_off_with_bounded_memory(tmp_path: Path) -> None:
    proc = _serve(tmp_path)
    try:
        address = announced(tmp_path / "serve.log", proc)
        metrics = announced(tmp_path / "serve.log", proc, METRICS_LINE)
        # the client's own window stays at 64 KiB (no BDP probing): what it does not read waits in the coordinator
        with grpc.insecure_channel(address, options=[("grpc.http2.bdp_probe", 0)]) as channel:
            ready = grpc.channel_ready_future(channel)
            started = Deadline(60)  # an interpreter's imports: slower the more the machine is shared
            while not ready.done():
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2_000:]
                assert not started.passed(), f"the coordinator did not start in {started.elapsed():.0f} s"
                time.sleep(0.1)
            joined = _stable_member(channel)
            late = pb.SyncGroupRequest(group_id="g", member_id=joined.member_id, generation=joined.generation,
                                       protocol_name="round-robin")
            answer_bytes = pb.SessionResponse(tag=1, sync_group=pb_grpc.GroupCoordinatorStub(channel).SyncGroup(
                late, timeout=30)).ByteSize()
            assert answer_bytes * ASKS > 100 * BOUND  # what the client asks for, unread, is far past the bound
            child = psutil.Process(proc.pid)
            before = child.memory_info().rss
            requests = (pb.SessionRequest(tag=tag, sync_group=late).SerializeToString() for tag in range(1, ASKS + 1))
            call = channel.stream_stream("/groupcoord.v1.GroupCoordinator/Session", request_serializer=None,
                                         response_deserializer=None)(requests)
            peak_rss = before
            deadline = time.monotonic() + 60
            while _metric(metrics, "groupcoord_session_streams") != 0 or \
                    _metric(metrics, "groupcoord_session_buffered_bytes_peak") == 0:
                peak_rss = max(peak_rss, child.memory_info().rss)
                assert time.monotonic() < deadline, "the stream was not cut off"
                time.sleep(0.05)
            peak_rss = max(peak_rss, child.memory_info().rss)
            buffered_peak = _metric(metrics, "groupcoord_session_buffered_bytes_peak")
            assert buffered_peak <= BOUND + answer_bytes  # the bound, besides the answer being written
            assert _metric(metrics, 'groupcoord_session_streams_ended_total{reason="slow_reader"}') == 1
            assert _metric(metrics, "groupcoord_session_buffered_bytes") == 0  # all dropped at the cut
            read = 0
            with pytest.raises(grpc.RpcError) as ended:
                for _ in call:  # what got through before the cut, then the status
                    read += 1
            assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "session_max_buffered_bytes" in (ended.value.details() or "")
            assert read < ASKS / 10
        grown_mib = (peak_rss - before) / 2**20
        print(f"asked {answer_bytes * ASKS / 2**20:.0f} MiB of answers unread; buffered peak {buffered_peak:,.0f} B; "
              f"read {read} answers; RSS {before / 2**20:.0f} -> peak {peak_rss / 2**20:.0f} MiB")
        assert grown_mib < 32, f"the coordinator grew by {grown_mib:.0f} MiB for a client that did not read"
        assert proc.poll() is None  # and it serves on
    finally:
        proc.terminate()
        proc.wait(30)
