"""The leader sees only the coordinator's record of ownership, never a member's claim (issue 38 item 2).

A leader written against Kafka's classic protocol reads what each member owns from the member's
own metadata (``MemberMetadata.owned``), as Kafka's consumer leader reads owned partitions from
each subscription. Before the coordinator rewrote that field, a liar claiming the six tasks of a
stock cooperative worker made such a leader's cooperative step hold back every one of them: the
honest worker revoked all six (then got three back). The leader here is that third-party leader,
and the liar too (a raw gRPC client); the honest worker is a stock ``groupcoord worker`` process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Self

import grpc
import pytest

from groupcoord.admin import AdminClient
from groupcoord.assignors.base import Assignment, AssignmentContext
from groupcoord.assignors.cooperative import cooperative_step
from groupcoord.assignors.registry import get_assignor
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.wire import context_from_join, member_from_pb, sync_request_from_assignment
from tests.processes import stop_processes

G = "record"
TASKS = [f"t{i}" for i in range(6)]
WAIT_S = 180  # a worker process starts in seconds; at load 40 on two cores it took over 60


def metadata_reading_context(response: pb.JoinGroupResponse) -> AssignmentContext:
    """The leader's context as a third-party leader builds it: ownership from each member's metadata."""
    context = context_from_join(G, response)
    members = tuple(member_from_pb(m) for m in response.members)  # no generation: reads metadata.owned
    return AssignmentContext(group_id=G, generation=context.generation, members=members, tasks=context.tasks,
                             load_snapshot=None, rng=context.rng, rebalance_protocol=context.rebalance_protocol)


class LyingLeader:
    """Joins first (so it leads); gives every task to the honest worker until ``claim`` is set, then
    claims all six on every join and assigns round-robin's first cooperative step."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.GroupCoordinatorStub(self.channel)
        self.claim = threading.Event()
        self.stop = threading.Event()
        self.views: list[dict[str, list[str]]] = []  # what each leader answer said members own
        self.thread = threading.Thread(target=self.run, daemon=True)

    def request(self, member_id: str) -> pb.JoinGroupRequest:
        owned = [pb.TaskReplica(task_id=t) for t in TASKS] if self.claim.is_set() else []
        return pb.JoinGroupRequest(
            group_id=G, member_id=member_id, client_id="liar", session_timeout_ms=30_000,
            rebalance_timeout_ms=60_000, protocols=["round-robin"], rebalance_protocols=["eager", "cooperative"],
            metadata=pb.MemberMetadata(owned=owned, owned_generation=10**9 if owned else -1))

    def run(self) -> None:
        member_id = ""
        while not self.stop.is_set():
            try:
                member_id = self.round(member_id)
            except grpc.RpcError:
                if self.stop.wait(0.1):
                    return

    def assign(self, joined: pb.JoinGroupResponse) -> Assignment:
        context = metadata_reading_context(joined)
        if not self.claim.is_set():
            everything = [r for t in context.tasks for r in t.replica_ids()]
            return Assignment(members={m.member_id: everything if m.client_id == "honest" else []
                                       for m in context.members})
        return cooperative_step(context, get_assignor("round-robin").assign(context))

    def round(self, member_id: str) -> str:
        joined = self.stub.JoinGroup(self.request(member_id), timeout=30)
        if joined.error.code == pb.MEMBER_ID_REQUIRED:
            return str(joined.member_id)
        if joined.error.code != pb.NONE:
            self.stop.wait(0.05)
            return "" if joined.error.code == pb.UNKNOWN_MEMBER_ID else member_id
        member_id, claiming = joined.member_id, self.claim.is_set()
        if joined.leader_id == member_id and joined.members:
            self.views.append({m.client_id: sorted(r.task_id for r in m.metadata.owned) for m in joined.members})
            sync = sync_request_from_assignment(G, member_id, joined.generation, self.assign(joined))
        else:
            sync = pb.SyncGroupRequest(group_id=G, member_id=member_id, generation=joined.generation)
        synced = self.stub.SyncGroup(sync, timeout=30)
        if synced.error.code != pb.NONE or synced.rejoin:
            return member_id
        while not self.stop.wait(0.3) and self.claim.is_set() == claiming:  # a new claim: join again
            beat = self.stub.Heartbeat(pb.HeartbeatRequest(group_id=G, member_id=member_id,
                                                           generation=joined.generation), timeout=10)
            if beat.error.code != pb.NONE:
                break
        return member_id

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(40)
        self.channel.close()


@pytest.mark.slow
def test_a_claim_never_reaches_a_leader_that_reads_ownership_from_the_metadata(
        server: ServerThread, cli_env: dict[str, str]) -> None:
    admin = AdminClient(server.address, timeout_s=10)
    command = [sys.executable, "-m", "groupcoord.cli", "worker", "--group", G, "--coordinator", server.address,
               "--name", "honest", "--rebalance-protocol", "cooperative", "--session-timeout-ms", "30000",
               "--heartbeat-interval-ms", "500", "--rebalance-timeout-ms", "60000"]
    honest: subprocess.Popen[str] | None = None
    try:
        with LyingLeader(server.address) as liar:
            admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 1, WAIT_S)
            honest = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      env=cli_env)
            admin.wait_for(G, lambda d: d.state == pb.STABLE and len(d.members) == 2, WAIT_S)
            admin.put_tasks(G, TASKS)
            runs_six = admin.wait_for(G, lambda d: d.state == pb.STABLE and any(
                m.member.client_id == "honest" and len(m.assigned) == 6 for m in d.members), WAIT_S)
            liar.claim.set()
            settled = admin.wait_for(G, lambda d: d.state == pb.STABLE and d.generation > runs_six.generation
                                     and sum(len(m.assigned) for m in d.members) == 6
                                     and all(len(m.assigned) == 3 for m in d.members), WAIT_S)
            claimed_views = liar.views[-2:]
        kept = {t.task_id for m in settled.members if m.member.client_id == "honest" for t in m.assigned}
    finally:
        stop_processes([honest] if honest else [])
        admin.close()
    assert honest is not None and honest.stdout is not None
    events = [json.loads(line) for line in honest.stdout.read().splitlines() if line.startswith("{")]
    if [e["event"] for e in events[-2:]] == ["revoked", "left"]:
        events = events[:-2]  # its stop at the end of the test
    revoked = [t for e in events if e["event"] == "revoked" for t in e["tasks"]]
    # what the leader read as the liar's ownership: the coordinator's record (nothing, then its three)
    assert all(len(view["liar"]) <= 3 and not set(view["liar"]) & set(view["honest"]) for view in claimed_views), \
        claimed_views
    assert len(kept) == 3
    assert not set(revoked) & kept, (revoked, kept)  # it revoked only what moved
    assert len(revoked) == 3, revoked
