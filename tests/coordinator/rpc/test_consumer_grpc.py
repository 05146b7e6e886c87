"""The consumer protocol (GroupHeartbeat) over a real gRPC server on loopback, with raw stubs as any
client would speak it; the server's timers on an injected clock (sessions end when the test says)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from groupcoord.coordinator.auth.acl import parse_acls
from groupcoord.coordinator.auth.guard import Guard, Policy
from groupcoord.coordinator.auth.tokens import parse_tokens
from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from tests.security_pki import Pki, Tokens
from tests.zookeeper_server import wait_until

G = "g"
SESSION_MS = 6_000


@dataclass
class Coordinator:
    server: ServerThread
    clock: FakeClock
    member: pb_grpc.GroupCoordinatorStub
    admin: pb_grpc.GroupAdminStub

    def advance(self, seconds: float) -> None:
        """Move the server's clock and fire what is due, on its loop (as its timer task would)."""
        runtime = self.server.runtime
        self.server.call(lambda: (self.clock.advance(seconds), runtime.poll_timers()))

    def group(self) -> Any:
        return self.server.call(lambda: self.server.runtime.model.consumer.groups.get(G))

    def target_settled(self) -> None:
        """Wait (bounded) until the group's target is computed for its current epoch (off the loop)."""
        def settled() -> bool:
            self.advance(0.2)
            group = self.group()
            return group is not None and self.server.call(lambda: group.target_epoch == group.epoch)
        wait_until(settled, 20, "the group's target")


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    clock = FakeClock()
    runtime = CoordinatorRuntime(CoordinatorConfig(), clock=clock, on_change=lambda group: group.validate())
    with ServerThread(runtime) as server, grpc.insecure_channel(server.address) as channel:
        yield Coordinator(server, clock, pb_grpc.GroupCoordinatorStub(channel), pb_grpc.GroupAdminStub(channel))


@dataclass
class Member:
    """A raw-stub member that runs what it was last given and reports it."""

    stub: pb_grpc.GroupCoordinatorStub
    name: str
    member_id: str = ""
    epoch: int = 0
    running: set[tuple[str, int]] = field(default_factory=set)

    def join(self, **fields: Any) -> pb.GroupHeartbeatResponse:
        return self._send(pb.GroupHeartbeatRequest(group_id=G, member_epoch=0, client_id=self.name,
                                                   session_timeout_ms=SESSION_MS, **fields))

    def beat(self, report: bool = True) -> pb.GroupHeartbeatResponse:
        request = pb.GroupHeartbeatRequest(group_id=G, member_id=self.member_id, member_epoch=self.epoch)
        if report:
            request.owned.SetInParent()
            request.owned.tasks.extend(pb.TaskReplica(task_id=t, replica=r) for t, r in sorted(self.running))
        return self._send(request)

    def _send(self, request: pb.GroupHeartbeatRequest) -> pb.GroupHeartbeatResponse:
        response: pb.GroupHeartbeatResponse = self.stub.GroupHeartbeat(request, timeout=10)
        if response.error.code == pb.NONE:
            self.member_id, self.epoch = response.member_id, response.member_epoch
            if response.HasField("assignment"):
                self.running = {(t.task_id, t.replica) for t in response.assignment.tasks}
        return response


def test_members_join_share_tasks_and_hand_them_over_only_once_released(coordinator: Coordinator) -> None:
    c = coordinator
    catalog = {(f"t{i}", 0) for i in range(6)}
    assert c.admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=t) for t, _ in catalog]),
                            timeout=10).error.code == pb.NONE
    a, b, d = (Member(c.member, n) for n in "abd")
    joined = a.join()
    assert joined.error.code == pb.NONE and joined.member_id.startswith("a-") and joined.heartbeat_interval_ms == 5_000
    b.join()
    c.target_settled()
    a.beat(), b.beat()
    assert a.running.isdisjoint(b.running) and a.running | b.running == catalog and len(a.running) == 3

    d.join()  # a third member: its tasks come from a and b, only once they let them go
    c.target_settled()
    d.beat()
    assert d.running == set()  # its two tasks are a's and b's still
    a.beat(report=False), b.beat(report=False)  # told to give one up each; they say nothing of it yet
    d.beat()
    assert d.running == set()  # the coordinator has not heard them let go
    a.beat()  # a reports what it kept: its task is released
    d.beat()
    assert len(d.running) == 1 and not d.running & (a.running | b.running)
    b.beat()
    d.beat()
    assert len(d.running) == 2 and not d.running & (a.running | b.running)
    assert a.running | b.running | d.running == catalog

    stale = c.member.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id=G, member_id=a.member_id,
                                                             member_epoch=a.epoch + 5), timeout=10)
    assert stale.error.code == pb.FENCED_MEMBER_EPOCH and "join again with epoch 0" in stale.error.message

    left = c.member.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id=G, member_id=a.member_id, member_epoch=-1),
                                   timeout=10)
    assert left.error.code == pb.NONE and left.member_epoch == -1
    c.target_settled()
    for _ in range(3):
        b.beat(), d.beat()
    assert b.running | d.running == catalog and b.running.isdisjoint(d.running)

    classic = c.member.JoinGroup(pb.JoinGroupRequest(group_id=G, session_timeout_ms=SESSION_MS,
                                                     protocols=["round-robin"]), timeout=10)
    assert classic.error.code == pb.NONE and classic.leader_id == ""  # a classic member of it (test_conversion*)


def test_a_session_ends_on_the_servers_timers(coordinator: Coordinator) -> None:
    c = coordinator
    c.admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id="t")]), timeout=10)
    a, b = Member(c.member, "a"), Member(c.member, "b")
    a.join(), b.join()
    c.target_settled()
    a.beat(), b.beat()
    for _ in range(4):  # b goes on heartbeating; a falls silent past its session
        c.advance(2.0)
        b.beat()
    late = a.beat()
    assert late.error.code == pb.UNKNOWN_MEMBER_ID
    c.target_settled()
    b.beat()
    assert b.running == {("t", 0)}


def test_a_classic_group_forming_tells_a_consumer_member_to_retry(coordinator: Coordinator) -> None:
    c = coordinator
    first = c.member.JoinGroup(pb.JoinGroupRequest(group_id="classic", session_timeout_ms=SESSION_MS,
                                                   protocols=["round-robin"]), timeout=10)
    assert first.error.code == pb.MEMBER_ID_REQUIRED
    retry = c.member.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id="classic", member_epoch=0), timeout=10)
    assert retry.error.code == pb.REBALANCE_IN_PROGRESS and "retry" in retry.error.message
    refused = c.member.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id="classic", member_id="m", member_epoch=3),
                                      timeout=10)
    assert refused.error.code == pb.INCONSISTENT_GROUP_PROTOCOL and "classic protocol" in refused.error.message


def test_bad_bytes_and_bad_fields_get_clear_errors(coordinator: Coordinator) -> None:
    c = coordinator
    garbage = c.server.address
    with grpc.insecure_channel(garbage) as channel:
        raw = channel.unary_unary("/groupcoord.v1.GroupCoordinator/GroupHeartbeat")
        with pytest.raises(grpc.RpcError) as caught:
            raw(b"\xff\xff\xff", timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad = c.member.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id=G, member_epoch=-7), timeout=10)
    assert bad.error.code == pb.INVALID_REQUEST and "member_epoch" in bad.error.message
    assert c.group() is None


ACLS = """
[[acl]]
principal = "User:w1"
group = "g"
operations = ["member"]

[[acl]]
principal = "User:w2"
group = "g"
operations = ["member"]
"""


def test_acls_hold_for_group_heartbeat(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    (tmp_path / "tokens").mkdir()
    pki = Pki(tmp_path / "pki")
    tokens = Tokens(tmp_path / "tokens")
    for name in ("w1", "w2", "stranger"):
        tokens.new(name)
    tokens.server_file(["w1", "w2", "stranger"])
    runtime = CoordinatorRuntime(CoordinatorConfig())
    guard = Guard(Policy(tokens=parse_tokens((tokens.root / "tokens").read_text()),
                         acls=parse_acls(tomllib.loads(ACLS))), owner_of=runtime.model.member_principal)
    with ServerThread(runtime, credentials=pki.server_credentials(mtls=False), interceptors=[guard]) as server, \
            grpc.secure_channel(server.address, grpc.ssl_channel_credentials(pki.ca_file.read_bytes())) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)

        def call(name: str, request: pb.GroupHeartbeatRequest) -> Any:
            try:
                return stub.GroupHeartbeat(request, timeout=10,
                                           metadata=[("authorization", f"Bearer {tokens.tokens[name]}")])
            except grpc.RpcError as error:
                return error

        stranger = call("stranger", pb.GroupHeartbeatRequest(group_id=G, member_epoch=0))
        assert isinstance(stranger, grpc.RpcError) and stranger.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may not member any group" in (stranger.details() or "")
        joined = call("w1", pb.GroupHeartbeatRequest(group_id=G, member_epoch=0))
        assert joined.error.code == pb.NONE
        borrowed = call("w2", pb.GroupHeartbeatRequest(group_id=G, member_id=joined.member_id, member_epoch=-1))
        assert isinstance(borrowed, grpc.RpcError) and borrowed.code() == grpc.StatusCode.PERMISSION_DENIED
        assert server.call(lambda: joined.member_id in runtime.model.consumer.groups[G].members)
        assert call("w1", pb.GroupHeartbeatRequest(group_id=G, member_id=joined.member_id,
                                                   member_epoch=-1)).member_epoch == -1


def test_the_docs_example_runs_against_a_memory_coordinator() -> None:
    """docs/protocol2.md's snippet, as written, against ``--store memory``'s kind of coordinator."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "protocol2.md").read_text()
    snippet = page.split("```python\n", 1)[1].split("```", 1)[0]
    with ServerThread(CoordinatorRuntime(CoordinatorConfig())) as server:
        scope: dict[str, Any] = {}
        exec(snippet.replace("127.0.0.1:9400", server.address), scope)  # noqa: S102  # our own page's example
    assert scope["joined"].error.code == pb.NONE and scope["answer"].error.code == pb.NONE
    assert scope["answer"].member_epoch >= scope["joined"].member_epoch >= 1


def test_a_long_owned_list_is_checked_and_bounded() -> None:
    """1,000 entries and up are checked on a checker thread; past max_tasks_per_request, refused."""
    runtime = CoordinatorRuntime(CoordinatorConfig(max_tasks_per_request=2_000))
    with ServerThread(runtime) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        joined = stub.GroupHeartbeat(pb.GroupHeartbeatRequest(group_id=G, member_epoch=0), timeout=10)

        def beat(owned: list[pb.TaskReplica]) -> pb.GroupHeartbeatResponse:
            request = pb.GroupHeartbeatRequest(group_id=G, member_id=joined.member_id,
                                               member_epoch=joined.member_epoch, owned=pb.TaskReplicaList(tasks=owned))
            answer: pb.GroupHeartbeatResponse = stub.GroupHeartbeat(request, timeout=10)
            return answer

        fine = [pb.TaskReplica(task_id=f"t{i}") for i in range(1_500)]
        assert beat(fine).error.code == pb.NONE  # claims beyond its assignment are not believed, not refused
        bad = beat([*fine, pb.TaskReplica(task_id="t", replica=-1)])
        assert bad.error.code == pb.INVALID_REQUEST and "replica -1" in bad.error.message
        many = beat([pb.TaskReplica(task_id=f"t{i}") for i in range(2_001)])
        assert many.error.code == pb.INVALID_REQUEST and "max_tasks_per_request" in many.error.message
        assert server.call(lambda: runtime.model.consumer.held(G)) == {}


def _names(replicas: Any) -> set[str]:
    return {t.task_id for t in replicas}


def test_describe_list_the_cli_and_the_console_show_a_consumer_group_as_it_is(
        coordinator: Coordinator, capsys: pytest.CaptureFixture[str]) -> None:
    """Mid-change: a and b asked to give a task up each and not yet done, d waiting for them."""
    from groupcoord.cli import main
    from groupcoord.console.app import ConsoleSettings, templates
    from groupcoord.console.views import group_view, page_of

    c = coordinator
    c.admin.PutTasks(pb.PutTasksRequest(group_id=G, tasks=[pb.Task(task_id=f"t{i}") for i in range(6)]), timeout=10)
    a, b, d = (Member(c.member, n) for n in "abd")
    a.join(), b.join()
    c.target_settled()
    a.beat(), b.beat()
    d.join()
    c.target_settled()
    a.beat(report=False), b.beat(report=False), d.beat()
    described = c.admin.DescribeGroup(pb.DescribeGroupRequest(group_id=G), timeout=10)
    group = c.group()
    assert described.error.code == pb.NONE and described.group_type == "consumer"
    assert described.state == pb.RECONCILING and described.generation == 0 and described.protocol == "sticky"
    assert (described.group_epoch, described.target_epoch) == (group.epoch, group.target_epoch)
    shown = {m.member.member_id: m for m in described.members}
    assert set(shown) == {a.member_id, b.member_id, d.member_id} and len(described.tasks) == 6
    for member in (a, b):
        state = shown[member.member_id].consumer
        assert state.state == "unrevoked_tasks" and state.member_epoch == member.epoch < group.target_epoch
        assert _names(shown[member.member_id].assigned) == {t for t, _ in member.running} == _names(state.target)
        assert len(state.revoking) == 1 and not state.waiting
    waiting = shown[d.member_id].consumer
    assert waiting.state == "unreleased_tasks" and waiting.member_epoch == group.target_epoch == d.epoch
    assert not shown[d.member_id].assigned and _names(waiting.waiting) == _names(waiting.target)
    assert _names(waiting.waiting) == _names(shown[a.member_id].consumer.revoking) | _names(
        shown[b.member_id].consumer.revoking)

    [listed] = [g for g in c.admin.ListGroups(pb.ListGroupsRequest(), timeout=10).groups if g.group_id == G]
    assert (listed.group_type, listed.state, listed.num_members, listed.group_epoch, listed.target_epoch) == (
        "consumer", pb.RECONCILING, 3, group.epoch, group.target_epoch)

    assert main(["groups", "describe", "--group", G, "--coordinator", c.server.address, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["type"], info["state"], info["group_epoch"], info["target_epoch"]) == (
        "consumer", "Reconciling", group.epoch, group.target_epoch)
    by_id = {m["member_id"]: m for m in info["members"]}
    assert by_id[d.member_id]["waiting"] and by_id[d.member_id]["state"] == "unreleased_tasks"
    assert by_id[a.member_id]["revoking"] and by_id[a.member_id]["member_epoch"] == a.epoch
    assert main(["groups", "describe", "--group", G, "--coordinator", c.server.address, "--wide"]) == 0
    table = capsys.readouterr().out
    assert f"Reconciling, group epoch {group.epoch}, target epoch {group.target_epoch}" in table
    assert "GIVING-UP" in table and "WAITING-FOR" in table and "unreleased_tasks" in table
    assert main(["groups", "list", "--coordinator", c.server.address]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"{G}\t"))
    assert line == f"{G}\tReconciling\tepoch {group.epoch} (target {group.target_epoch})\t3 member(s)\tsticky\tconsumer"

    view = group_view(described, [], None, now_ms=0)
    html = templates().get_template("_group.html").render(
        settings=ConsoleSettings(access_token="t"), query={}, group=view, group_id=G,
        members=page_of(view["members"], 1, 100), problem="", notice="")
    assert f'id="group-epochs">{group.epoch}, target epoch {group.target_epoch}' in html
    assert "unreleased_tasks, target 2; waiting for" in html and "; giving up t" in html

    for member in (a, b, d, a, b, d):  # everyone reports: the group settles
        member.beat()
    settled = c.admin.DescribeGroup(pb.DescribeGroupRequest(group_id=G), timeout=10)
    assert settled.state == pb.STABLE and {m.consumer.member_epoch for m in settled.members} == {group.target_epoch}
    assert all(_names(m.assigned) == _names(m.consumer.target) and not m.consumer.waiting for m in settled.members)


def test_a_classic_group_is_listed_and_described_as_classic(coordinator: Coordinator) -> None:
    c = coordinator
    c.admin.PutTasks(pb.PutTasksRequest(group_id="old", tasks=[pb.Task(task_id="t")]), timeout=10)
    described = c.admin.DescribeGroup(pb.DescribeGroupRequest(group_id="old"), timeout=10)
    assert described.group_type == "classic" and described.group_epoch == 0
    [listed] = c.admin.ListGroups(pb.ListGroupsRequest(), timeout=10).groups
    assert listed.group_type == "classic" and listed.state == pb.EMPTY
