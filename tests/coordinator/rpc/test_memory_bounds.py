"""Memory stays bounded: every limit driven, over and over, against a real coordinator process.

Each round sends what a hostile but authenticated client could: oversized ids, a catalog at
``max_tasks_per_request`` (and one over ``group_max_tasks``), thousands of attributes, load
reports at and over ``max_tasks_per_report``, load snapshots near and over ``max_snapshot_bytes``,
a flood of first joins past ``group_max_pending_members``, a leader's split asking for INT32_MAX
replicas. Every over-limit request gets its specific error. The coordinator's RSS after the
first round (its working set: one full catalog, one snapshot) must not keep growing over the
rounds that follow.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
import pytest

from groupcoord.channels import channel_options
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.coordinator.storage.test_restart import serve

ROUNDS = 4
TASKS = 100_000  # max_tasks_per_request and group_max_tasks


def _tasks(prefix: str, n: int) -> list[pb.Task]:
    return [pb.Task(task_id=f"{prefix}{i:06d}", weight=1.0) for i in range(n)]


def _snapshot(group: str, tasks: int, created_ms: int) -> pb.LoadSnapshot:
    return pb.LoadSnapshot(group_id=group, snapshot_id=f"s{created_ms}", created_ms=created_ms, tasks=[
        pb.TaskLoadStats(task_id=f"t{i:06d}", worker_id="w" * 40, short_samples=10) for i in range(tasks)])


class Hostile:
    """One round's requests; each over-limit one checked for its error code."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.member = pb_grpc.GroupCoordinatorStub(channel)
        self.admin = pb_grpc.GroupAdminStub(channel)
        self.catalog = pb.PutTasksRequest(group_id="big", tasks=_tasks("t", TASKS))
        self.over_catalog = pb.PutTasksRequest(group_id="big", tasks=_tasks("u", 10))
        attributes = pb.Task(task_id="attrs")
        attributes.attributes.update({f"k{i}": "v" for i in range(10_000)})
        self.attributes = pb.PutTasksRequest(group_id="big", tasks=[attributes])
        self.big_id = "x" * 1_048_576

    def expect(self, code: int, response: object) -> None:
        error = response.error  # type: ignore[attr-defined]
        assert error.code == code, (pb.ErrorCode.Name(error.code), error.message[:200])

    def join(self, group: str, member_id: str = "", client_id: str = "c") -> pb.JoinGroupResponse:
        response: pb.JoinGroupResponse = self.member.JoinGroup(pb.JoinGroupRequest(
            group_id=group, member_id=member_id, client_id=client_id, session_timeout_ms=60_000,
            rebalance_timeout_ms=60_000, protocols=["round-robin"]), timeout=120)
        return response

    def round(self, n: int) -> None:
        for _ in range(5):
            self.expect(pb.INVALID_REQUEST, self.join("big", client_id=self.big_id))
            self.expect(pb.INVALID_GROUP_ID, self.join(self.big_id))
        self.expect(pb.NONE, self.admin.PutTasks(self.catalog, timeout=120))
        self.expect(pb.INVALID_REQUEST, self.admin.PutTasks(self.over_catalog, timeout=120))  # group_max_tasks
        self.expect(pb.INVALID_REQUEST, self.admin.PutTasks(self.attributes, timeout=120))  # max_task_attributes
        # a member of "big" (the leader) that reports load at and over max_tasks_per_report
        first = self.join("big")
        joined = self.join("big", first.member_id)
        self.expect(pb.NONE, joined)
        for size, code in ((10_000, pb.NONE), (10_001, pb.INVALID_REQUEST)):
            report = pb.ReportLoadRequest(group_id="big", member_id=joined.member_id, generation=joined.generation,
                                          report=pb.LoadReport(ts_ms=1, tasks=[
                                              pb.TaskLoadReport(task_id=f"t{i:06d}") for i in range(size)]))
            for _ in range(3 if code == pb.NONE else 1):
                self.expect(code, self.member.ReportLoad(report, timeout=120))
        # the leader splits a task into a child with INT32_MAX replicas: refused, the group rebalances
        split = pb.SyncGroupRequest(group_id="big", member_id=joined.member_id, generation=joined.generation,
                                    splits=[pb.TaskSplit(parent_task_id="t000000", children=[
                                        pb.Task(task_id="child", replicas=2**31 - 1)])])
        self.expect(pb.INVALID_ASSIGNMENT, self.member.SyncGroup(split, timeout=120))
        self.expect(pb.NONE, self.member.LeaveGroup(pb.LeaveGroupRequest(
            group_id="big", member_id=joined.member_id), timeout=60))
        # load snapshots: one near max_snapshot_bytes (16 MiB) kept, one over it refused (past the method's
        # bound, max_snapshot_bytes + 64 KiB, before it is decoded)
        now = int(time.time() * 1000) + n
        self.expect(pb.NONE, self.admin.PublishLoadSnapshot(
            pb.PublishLoadSnapshotRequest(snapshot=_snapshot("big", 200_000, now)), timeout=120))
        with pytest.raises(grpc.RpcError) as over:
            self.admin.PublishLoadSnapshot(pb.PublishLoadSnapshotRequest(snapshot=_snapshot("big", 400_000, now + 1)),
                                           timeout=120)
        assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, over.value.details()
        assert "at most 16,842,752 for this method" in (over.value.details() or "")
        # first joins that never come back: at most group_max_pending_members ids are kept (past its
        # share, an asker's oldest id makes room for its new one)
        codes = [self.join(f"flood{n % 2}").error.code for _ in range(1_200)]
        assert set(codes) == {pb.MEMBER_ID_REQUIRED}


def _settled_rss(process: psutil.Process) -> int:
    """The least RSS over half a second: the working set, not a transient of a write in flight."""
    samples = []
    for _ in range(6):
        samples.append(process.memory_info().rss)
        time.sleep(0.1)
    return min(samples)


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.alone  # measures RSS and heartbeat latency: no neighbours
def test_rss_stays_bounded_under_every_limit(tmp_path: Path, cli_env: dict[str, str]) -> None:
    coordinator, address = serve(tmp_path / "data", cli_env)
    process = psutil.Process(coordinator.pid)
    rss: list[int] = []
    try:
        with grpc.insecure_channel(address, options=channel_options()) as channel:
            hostile = Hostile(channel)
            for n in range(ROUNDS):
                hostile.round(n)
                hostile.admin.DescribeGroup(pb.DescribeGroupRequest(group_id="big"), timeout=120)  # writes landed
                rss.append(_settled_rss(process))
        assert coordinator.poll() is None, "the coordinator died"
    finally:
        coordinator.terminate()
        try:
            coordinator.wait(30)
        except subprocess.TimeoutExpired:
            coordinator.kill()
    mib = [r // 1_048_576 for r in rss]
    print(f"coordinator RSS after each round (MiB): {mib}", file=sys.stderr)
    # after the first rounds the working set is there; later rounds may not add to it
    assert min(rss[-2:]) <= max(rss[:2]) * 1.2, f"RSS kept growing: {mib} MiB"
    assert rss[-1] < 1_500 * 1_048_576, f"RSS {mib[-1]} MiB for one 100,000-task group"
