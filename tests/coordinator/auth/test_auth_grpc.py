"""Security over real gRPC on loopback: TLS, mTLS principals, tokens, ACLs, and member ids that are
no longer capabilities. Every refusal is checked for its status, its message and that it changed
nothing."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity
from groupcoord.coordinator.auth.acl import parse_acls
from groupcoord.coordinator.auth.guard import RULES, Guard, Policy
from groupcoord.coordinator.auth.tokens import parse_tokens
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.coordinator.storage.sqlite_store import SqliteStore
from groupcoord.coordinator.storage.store import GroupStore
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.worker import WorkerClient, WorkerConfig
from groupcoord.worker.transport import Transport
from tests.security_pki import Pki, Tokens, subject
from tests.zookeeper_server import wait_until

ACL_TEXT = """
super_users = ["User:root"]

[[acl]]
principal = "User:worker-a"
group = "a"
operations = ["member"]

[[acl]]
principal = "User:worker-a2"
group = "a"
operations = ["member"]

[[acl]]
principal = "User:worker-b"
group = "b"
operations = ["member"]

[[acl]]
principal = "User:ops-a"
group = "a"
operations = ["admin"]

[[acl]]
principal = "User:viewer"
group = "team-"
pattern = "prefixed"
operations = ["describe"]

[[acl]]
principal = "User:CN=worker-a,OU=shop,O=Example"
group = "a"
operations = ["member"]
"""
NAMES = ["root", "worker-a", "worker-a2", "worker-b", "ops-a", "viewer", "stranger"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    made = Tokens(tmp_path_factory.mktemp("tokens"))
    for name in NAMES:
        made.new(name)
    made.new("unknown")  # a token the server does not know
    made.server_file([n for n in NAMES])
    return made


def _server(pki: Pki, *, mtls: bool, tokens: Tokens | None = None, store: GroupStore | None = None,
            rules: dict[str, Any] | None = None) -> GuardedServer:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200)
    runtime = CoordinatorRuntime(config, store=store, on_change=lambda group: group.validate())
    table = parse_tokens((tokens.root / "tokens").read_text()) if tokens is not None else None
    guard = Guard(Policy(mtls=mtls, tokens=table, acls=parse_acls(tomllib.loads(ACL_TEXT))),
                  owner_of=runtime.model.member_principal)
    if rules is not None:
        guard.rules = rules
    return GuardedServer(guard, runtime, credentials=pki.server_credentials(mtls=mtls), interceptors=[guard])


class GuardedServer(ServerThread):
    """A server thread that keeps its guard at hand (a test replaces its policy, as SIGHUP does)."""

    def __init__(self, guard: Guard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard


@pytest.fixture
def server(pki: Pki, tokens: Tokens) -> Iterator[ServerThread]:
    """TLS, tokens, ACLs."""
    with _server(pki, mtls=False, tokens=tokens) as running:
        yield running


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[ServerThread]:
    with _server(pki, mtls=True) as running:
        yield running


def admin(server: ServerThread, pki: Pki, tokens: Tokens, name: str) -> AdminClient:
    return AdminClient(server.address, security=ClientSecurity(tls_ca=str(pki.ca_file),
                                                               token_file=str(tokens.root / f"{name}.token")))


def rpc(server: ServerThread, pki: Pki, method: str, request: Any, *, token: str | None = None) -> Any:
    """Call ``method`` with ``token`` (or none); returns the response or the grpc.RpcError."""
    credentials = grpc.ssl_channel_credentials(pki.ca_file.read_bytes())
    with grpc.secure_channel(server.address, credentials) as channel:
        stub: Any = (pb_grpc.GroupCoordinatorStub if method in {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
                                                                 "ReportLoad", "FindCoordinator"} else pb_grpc.GroupAdminStub)(channel)
        metadata = [("authorization", f"Bearer {token}")] if token is not None else None
        try:
            return getattr(stub, method)(request, metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            return error


def denied(result: Any, code: grpc.StatusCode, *words: str) -> None:
    assert isinstance(result, grpc.RpcError), f"expected {code.name}, got {result}"
    assert result.code() == code, result.details()
    for word in words:
        assert word in result.details(), result.details()


class Quiet:
    def on_assigned(self, tasks: Any, generation: int) -> None: ...

    def on_revoked(self, tasks: Any) -> None: ...


def worker(server: ServerThread, group: str, *, session_stream: bool = True, **security: str) -> WorkerClient:
    config = WorkerConfig(group_id=group, coordinators=server.address, client_id="w", session_timeout_ms=5_000,
                          heartbeat_interval_ms=200, retry_backoff_max_ms=200, session_stream=session_stream,
                          **security)
    return WorkerClient(config, Quiet())


def stable_members(admin_client: AdminClient, group: str, count: int) -> pb.DescribeGroupResponse:
    return admin_client.wait_for(group, lambda d: d.state == pb.STABLE and len(d.members) == count, 20)


def snapshot(server: ServerThread, group: str) -> tuple[Any, ...]:
    """What a refused request must not change: state, generation, members and their owners, catalog."""
    def read() -> tuple[Any, ...]:
        g = server.runtime.model.groups.get(group)
        if g is None:
            return ()
        return (g.state, g.generation, tuple((m.member_id, m.principal) for m in g.members.values()), tuple(g.tasks))
    return server.call(read)


# ---------------------------------------------------------------------------------------------- the table


def test_every_rpc_of_every_service_has_a_rule() -> None:
    """When this fails, a new RPC was added: give it a rule in coordinator/auth/guard.py RULES."""
    methods = {f"/{service.full_name}/{method.name}" for service in pb.DESCRIPTOR.services_by_name.values()
               for method in service.methods}
    methods |= {f"/{s.full_name}/{m.name}" for s in health_pb2.DESCRIPTOR.services_by_name.values() for m in s.methods}
    methods |= {f"/{s.full_name}/{m.name}" for s in reflection_pb2.DESCRIPTOR.services_by_name.values()
                for m in s.methods}
    assert methods - set(RULES) == set()


def test_a_method_without_a_rule_is_refused(pki: Pki, tokens: Tokens) -> None:
    rules = {k: v for k, v in RULES.items() if not k.endswith("/DescribeGroup")}
    with _server(pki, mtls=False, tokens=tokens, rules=rules) as running:
        result = rpc(running, pki, "DescribeGroup", pb.DescribeGroupRequest(group_id="a"),
                     token=tokens.tokens["root"])
        denied(result, grpc.StatusCode.PERMISSION_DENIED, "User:root", "DescribeGroup", "no authorization rule")


# ---------------------------------------------------------------------------------------------- authentication


def test_no_token_and_unknown_token_are_unauthenticated(server: ServerThread, pki: Pki, tokens: Tokens) -> None:
    denied(rpc(server, pki, "ListGroups", pb.ListGroupsRequest()), grpc.StatusCode.UNAUTHENTICATED, "no credentials")
    denied(rpc(server, pki, "JoinGroup", pb.JoinGroupRequest(group_id="a"), token=tokens.tokens["unknown"]),
           grpc.StatusCode.UNAUTHENTICATED, "invalid token")
    with admin(server, pki, tokens, "unknown") as client, pytest.raises(errors.NotAuthenticatedError):
        client.list_groups()
    assert snapshot(server, "a") == ()


def test_a_worker_without_credentials_stops_with_unauthenticated(server: ServerThread, pki: Pki) -> None:
    client = worker(server, "a", tls_ca=str(pki.ca_file))
    with client:
        wait_until(lambda: client.fatal_error is not None, 20, "the worker to stop")
    assert isinstance(client.fatal_error, errors.NotAuthenticatedError)
    assert snapshot(server, "a") == ()


def test_health_is_open_and_reflection_needs_a_credential(server: ServerThread, pki: Pki, tokens: Tokens) -> None:
    credentials = grpc.ssl_channel_credentials(pki.ca_file.read_bytes())
    with grpc.secure_channel(server.address, credentials) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        token = [("authorization", f"Bearer {tokens.tokens['stranger']}")]
        listed = list(stub.ServerReflectionInfo(iter([request]), metadata=token, timeout=10))
        assert "groupcoord.v1.GroupAdmin" in {s.name for s in listed[0].list_services_response.service}


# ---------------------------------------------------------------------------------------------- ACLs


def test_a_reloaded_policy_applies_to_the_next_call_of_a_method_already_called(pki: Pki, tokens: Tokens) -> None:
    """The guard builds its wrapper once per method; the wrapper reads the policy at each call."""
    with _server(pki, mtls=False, tokens=tokens) as server:
        guard = server.guard
        request = pb.DescribeGroupRequest(group_id="a")
        token = tokens.tokens["ops-a"]
        for _ in range(2):  # the second call takes the wrapper built for the first
            assert not isinstance(rpc(server, pki, "DescribeGroup", request, token=token), grpc.RpcError)
        guard.policy = dataclasses.replace(guard.policy, acls=parse_acls(tomllib.loads('super_users = ["User:root"]')))
        denied(rpc(server, pki, "DescribeGroup", request, token=token), grpc.StatusCode.PERMISSION_DENIED,
               "User:ops-a may not describe any group")
        assert not isinstance(rpc(server, pki, "DescribeGroup", request, token=tokens.tokens["root"]), grpc.RpcError)


def test_a_worker_of_group_a_cannot_join_describe_or_change_group_b(
    server: ServerThread, pki: Pki, tokens: Tokens
) -> None:
    with admin(server, pki, tokens, "root") as root:
        root.put_tasks("b", ["t0", "t1"])
    before = snapshot(server, "b")
    token = tokens.tokens["worker-a"]
    denied(rpc(server, pki, "JoinGroup", pb.JoinGroupRequest(group_id="b", protocols=["round-robin"],
                                                             session_timeout_ms=5000), token=token),
           grpc.StatusCode.PERMISSION_DENIED, "User:worker-a may not member group 'b' (JoinGroup)")
    # worker-a is admin of no group: refused from its token alone, before the body is read; ops-a is
    # admin of group a: refused from the group id its request names
    for method, request, worker_a_refusal in [
        ("DescribeGroup", pb.DescribeGroupRequest(group_id="b"), "may not describe group 'b'"),
        ("PutTasks", pb.PutTasksRequest(group_id="b", tasks=[pb.Task(task_id="x")]), "may not admin any group"),
        ("DeleteTasks", pb.DeleteTasksRequest(group_id="b", task_ids=["t0"]), "may not admin any group"),
        ("DeleteGroup", pb.DeleteGroupRequest(group_id="b"), "may not admin any group"),
        ("PublishLoadSnapshot", pb.PublishLoadSnapshotRequest(snapshot=pb.LoadSnapshot(group_id="b")),
         "may not admin any group"),
    ]:
        denied(rpc(server, pki, method, request, token=token), grpc.StatusCode.PERMISSION_DENIED,
               "User:worker-a", worker_a_refusal, method)
        if method != "DescribeGroup":
            denied(rpc(server, pki, method, request, token=tokens.tokens["ops-a"]), grpc.StatusCode.PERMISSION_DENIED,
                   "User:ops-a may not admin group 'b'", method)
    assert snapshot(server, "b") == before
    client = worker(server, "b", tls_ca=str(pki.ca_file), token_file=str(tokens.root / "worker-a.token"))
    with client:
        wait_until(lambda: client.fatal_error is not None, 20, "the worker to stop")
    assert isinstance(client.fatal_error, errors.NotAuthorizedError)
    assert "User:worker-a may not member group 'b'" in str(client.fatal_error)
    assert snapshot(server, "b") == before


def test_members_may_not_edit_the_catalog_or_delete_their_group(server: ServerThread, pki: Pki,
                                                                 tokens: Tokens) -> None:
    with admin(server, pki, tokens, "ops-a") as ops:
        assert ops.put_tasks("a", ["t0"]) == 1  # admin on the group
    before = snapshot(server, "a")
    with admin(server, pki, tokens, "worker-a") as member:
        with pytest.raises(errors.NotAuthorizedError, match="User:worker-a may not admin any group .PutTasks."):
            member.put_tasks("a", ["t9"])
        with pytest.raises(errors.NotAuthorizedError, match="DeleteGroup"):
            member.delete_group("a")
        assert member.describe_group("a").group_id == "a"  # member implies describe (the leader reads snapshots)
    assert snapshot(server, "a") == before


def test_list_shows_only_the_groups_the_principal_may_describe(server: ServerThread, pki: Pki,
                                                               tokens: Tokens) -> None:
    with admin(server, pki, tokens, "root") as root:
        for group in ("a", "b", "team-x", "team-y", "teamz"):
            root.put_tasks(group, ["t"])
        assert {g.group_id for g in root.list_groups()} == {"a", "b", "team-x", "team-y", "teamz"}
    for name, visible in [("viewer", {"team-x", "team-y"}), ("worker-a", {"a"}), ("ops-a", {"a"}),
                          ("stranger", set())]:
        with admin(server, pki, tokens, name) as client:
            assert {g.group_id for g in client.list_groups()} == visible, name


def test_find_coordinator_answers_only_the_groups_the_principal_may_describe(server: ServerThread, pki: Pki,
                                                                              tokens: Tokens) -> None:
    """A worker with ``member`` finds its own group's coordinator; another group's entry is refused
    in place (GROUP_AUTHORIZATION_FAILED, no address), whether it exists or not."""
    ask = pb.FindCoordinatorRequest(group_ids=["a", "b", "nope"])
    found = rpc(server, pki, "FindCoordinator", ask, token=tokens.tokens["worker-a"])
    codes = [(c.group_id, c.error.code, c.address) for c in found.coordinators]
    assert codes == [("a", pb.NONE, server.address), ("b", pb.GROUP_AUTHORIZATION_FAILED, ""),
                     ("nope", pb.GROUP_AUTHORIZATION_FAILED, "")]
    denied(rpc(server, pki, "FindCoordinator", ask), grpc.StatusCode.UNAUTHENTICATED)
    described = rpc(server, pki, "DescribeCluster", pb.DescribeClusterRequest(), token=tokens.tokens["stranger"])
    assert described.mode == "standalone" and [c.address for c in described.coordinators] == [server.address]


# ---------------------------------------------------------------------------------------------- member ids


def test_another_principal_cannot_act_for_a_member_it_did_not_join(server: ServerThread, pki: Pki,
                                                                   tokens: Tokens) -> None:
    victim = worker(server, "a", tls_ca=str(pki.ca_file), token_file=str(tokens.root / "worker-a.token"))
    with victim, admin(server, pki, tokens, "worker-a2") as thief:
        described = stable_members(thief, "a", 1)  # DescribeGroup shows the member id: no longer enough
        member_id, generation = described.members[0].member.member_id, described.generation
        before = snapshot(server, "a")
        assert before[2] == ((member_id, "User:worker-a"),)
        token = tokens.tokens["worker-a2"]
        for method, request in [
            ("Heartbeat", pb.HeartbeatRequest(group_id="a", member_id=member_id, generation=generation)),
            ("SyncGroup", pb.SyncGroupRequest(group_id="a", member_id=member_id, generation=generation)),
            ("LeaveGroup", pb.LeaveGroupRequest(group_id="a", member_id=member_id)),
            ("LeaveGroup", pb.LeaveGroupRequest(group_id="a", members=[pb.MemberIdentity(member_id=member_id)])),
            ("ReportLoad", pb.ReportLoadRequest(group_id="a", member_id=member_id, generation=generation)),
            ("JoinGroup", pb.JoinGroupRequest(group_id="a", member_id=member_id, protocols=["round-robin"],
                                              session_timeout_ms=5000)),
        ]:
            denied(rpc(server, pki, method, request, token=token), grpc.StatusCode.PERMISSION_DENIED,
                   "User:worker-a2 may not act for member", "of group 'a'", "another principal joined it", method)
        assert snapshot(server, "a") == before
        assert victim.fatal_error is None
        with admin(server, pki, tokens, "ops-a") as ops:  # an admin of the group may remove it
            answers = ops.remove_members("a", member_ids=[member_id])
        assert answers[0].error.code == pb.NONE


def test_a_static_instance_belongs_to_the_principal_that_joined_it(server: ServerThread, pki: Pki,
                                                                   tokens: Tokens) -> None:
    owner = worker(server, "a", tls_ca=str(pki.ca_file), token_file=str(tokens.root / "worker-a.token"),
                   instance_id="i-1")
    with owner, admin(server, pki, tokens, "root") as root:
        stable_members(root, "a", 1)
        before = snapshot(server, "a")
        takeover = pb.JoinGroupRequest(group_id="a", instance_id="i-1", protocols=["round-robin"],
                                       session_timeout_ms=5000)
        denied(rpc(server, pki, "JoinGroup", takeover, token=tokens.tokens["worker-a2"]),
               grpc.StatusCode.PERMISSION_DENIED, "instance 'i-1' of group 'a'")
        assert snapshot(server, "a") == before


def test_the_owner_survives_a_restart(pki: Pki, tokens: Tokens, tmp_path: Path) -> None:
    db = tmp_path / "groups.db"
    with _server(pki, mtls=False, tokens=tokens, store=SqliteStore(db)) as first:
        client = worker(first, "a", tls_ca=str(pki.ca_file), token_file=str(tokens.root / "worker-a.token"),
                        instance_id="i-1")
        with client, admin(first, pki, tokens, "root") as root:
            member_id = stable_members(root, "a", 1).members[0].member.member_id
        first.runtime.store.close()
    with _server(pki, mtls=False, tokens=tokens, store=SqliteStore(db)) as second:
        second.call(second.runtime.load)
        assert snapshot(second, "a")[2] == ((member_id, "User:worker-a"),)
        denied(rpc(second, pki, "Heartbeat", pb.HeartbeatRequest(group_id="a", member_id=member_id, generation=1),
                   token=tokens.tokens["worker-a2"]), grpc.StatusCode.PERMISSION_DENIED, "another principal")
        second.runtime.store.close()


# ---------------------------------------------------------------------------------------------- mTLS


@pytest.mark.parametrize("session_stream", [False, True], ids=["unary", "stream"])
def test_the_certificate_subject_is_the_principal(mtls_server: ServerThread, pki: Pki, session_stream: bool) -> None:
    cert, key = pki.client("worker-a")
    client = worker(mtls_server, "a", tls_ca=str(pki.ca_file), tls_cert=str(cert), tls_key=str(key))
    security = ClientSecurity(tls_ca=str(pki.ca_file), tls_cert=str(cert), tls_key=str(key))
    with client, AdminClient(mtls_server.address, security=security) as reader:
        stable_members(reader, "a", 1)
        assert [m[1] for m in snapshot(mtls_server, "a")[2]] == [subject("worker-a")]
    other_cert, other_key = pki.client("worker-b")
    intruder = worker(mtls_server, "a", tls_ca=str(pki.ca_file), tls_cert=str(other_cert), tls_key=str(other_key),
                      session_stream=session_stream)
    with intruder:
        wait_until(lambda: intruder.fatal_error is not None, 20, "the intruder to stop")
    assert isinstance(intruder.fatal_error, errors.NotAuthorizedError)
    # no entry names this subject: refused from its certificate alone, before its JoinGroup is read (over the
    # stream: refused at open, PERMISSION_DENIED, and the worker's unary JoinGroup then says the same)
    assert f"{subject('worker-b')} may not member any group (JoinGroup)" in str(intruder.fatal_error)


@pytest.mark.parametrize("case", ["wrong CA", "certificate of another CA", "expired certificate", "no certificate"])
def test_clients_that_fail_the_handshake_reach_nothing(mtls_server: ServerThread, pki: Pki, case: str) -> None:
    cert, key = pki.client("worker-a")
    make: dict[str, Callable[[], ClientSecurity]] = {
        "wrong CA": lambda: ClientSecurity(tls_ca=str(pki.other_ca_file), tls_cert=str(cert), tls_key=str(key)),
        "certificate of another CA": lambda: ClientSecurity(
            tls_ca=str(pki.ca_file), **dict(zip(("tls_cert", "tls_key"), map(str, pki.client("x", ca=pki.other_ca))))),
        "expired certificate": lambda: ClientSecurity(
            tls_ca=str(pki.ca_file), **dict(zip(("tls_cert", "tls_key"), map(str, pki.client("old", expired=True))))),
        "no certificate": lambda: ClientSecurity(tls_ca=str(pki.ca_file)),
    }
    security = make[case]()
    with AdminClient(mtls_server.address, security=security, timeout_s=5) as client, \
            pytest.raises(errors.CoordinatorNotAvailableError):
        client.put_tasks("a", ["t0"])
    transport = Transport([mtls_server.address], security=security, name="w")  # what a worker sends through
    try:
        with pytest.raises(errors.CoordinatorNotAvailableError):
            transport.join_group(pb.JoinGroupRequest(group_id="a", protocols=["round-robin"],
                                                     session_timeout_ms=5000), timeout=5)
    finally:
        transport.close()
    assert snapshot(mtls_server, "a") == ()
