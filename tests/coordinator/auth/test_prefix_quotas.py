"""Quotas count against the principal that administers a group's name (issue 38 item 3).

Tenant A is admin on the prefix ``ab-``; tenant B is a member there (and admin on its own ``b-``).
Before: B created ``ab-orders`` and ``ab-billing`` by joining them first, the groups counted against
B, and once B had spent its own task quota A could not put its catalog in them ("the groups
User:tenant-b created would hold 1002 tasks"), nor delete them while B's members were in them.
Over real gRPC with TLS, tokens and ACLs, wired as ``groupcoord serve`` wires them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator

import pytest

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity
from groupcoord.coordinator.auth.acl import parse_acls
from groupcoord.coordinator.auth.guard import Guard, Policy
from groupcoord.coordinator.auth.prefix_owner import accounts_of, prefix_admin
from groupcoord.coordinator.auth.tokens import parse_tokens
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.auth.test_auth_grpc import rpc
from tests.security_pki import Pki, Tokens

ACLS = """
[[acl]]
principal = "User:tenant-a"
group = "ab-"
pattern = "prefixed"
operations = ["admin"]

[[acl]]
principal = "User:tenant-b"
group = "ab-"
pattern = "prefixed"
operations = ["member"]

[[acl]]
principal = "User:tenant-b"
group = "b-"
pattern = "prefixed"
operations = ["admin"]
"""
QUOTA = 1_000


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    made = Tokens(tmp_path_factory.mktemp("tokens"))
    for name in ("tenant-a", "tenant-b"):
        made.new(name)
    made.server_file()
    return made


@pytest.fixture
def server(pki: Pki, tokens: Tokens) -> Iterator[ServerThread]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               max_tasks_per_principal=QUOTA)
    runtime = CoordinatorRuntime(config, on_change=lambda group: group.validate())
    guard = Guard(Policy(tokens=parse_tokens((tokens.root / "tokens").read_text()),
                         acls=parse_acls(tomllib.loads(ACLS))), owner_of=runtime.model.member_principal)
    runtime.model.account_of = accounts_of(guard)  # as `groupcoord serve` does
    with ServerThread(runtime, credentials=pki.server_credentials(mtls=False), interceptors=[guard]) as running:
        yield running


def admin(server: ServerThread, pki: Pki, tokens: Tokens, name: str) -> AdminClient:
    return AdminClient(server.address, timeout_s=10, security=ClientSecurity(
        tls_ca=str(pki.ca_file), token_file=str(tokens.root / f"{name}.token")))


def join_as_b(server: ServerThread, pki: Pki, tokens: Tokens, group_id: str) -> None:
    """B's member in ``group_id`` (the first join creates the group)."""
    request = pb.JoinGroupRequest(group_id=group_id, client_id="b", session_timeout_ms=120_000,
                                  rebalance_timeout_ms=120_000, protocols=["round-robin"])  # there all test long
    token = tokens.tokens["tenant-b"]
    first = rpc(server, pki, "JoinGroup", request, token=token)
    assert first.error.code == pb.MEMBER_ID_REQUIRED, first
    request.member_id = first.member_id
    assert rpc(server, pki, "JoinGroup", request, token=token).error.code == pb.NONE


def test_a_member_of_a_shared_prefix_spends_the_prefix_admins_quota_not_its_own(
        server: ServerThread, pki: Pki, tokens: Tokens) -> None:
    a, b = admin(server, pki, tokens, "tenant-a"), admin(server, pki, tokens, "tenant-b")
    try:
        for group_id in ("ab-orders", "ab-billing"):
            join_as_b(server, pki, tokens, group_id)
        b.put_tasks("b-own", [f"b{i}" for i in range(QUOTA)])  # B spends its whole quota on its own group
        with pytest.raises(errors.GroupCoordError, match="tenant-b created would hold"):
            b.put_tasks("b-more", ["one-too-many"])
        # A puts its catalog in the group B created in A's prefix: A's quota, not B's
        assert a.put_tasks("ab-orders", ["o1", "o2"]) == 2
        with pytest.raises(errors.GroupCoordError, match="tenant-a created would hold 1001"):
            a.put_tasks("ab-orders", [f"o{i}" for i in range(3, QUOTA + 2)])
        # A deletes the other group B created in its prefix, B's member in it
        assert a.describe_group("ab-billing").state != pb.EMPTY
        a.delete_group("ab-billing")
        with pytest.raises(errors.GroupIdNotFoundError):
            a.describe_group("ab-billing")
        # B, a member there, still may not delete A's group; A may not delete B's own
        with pytest.raises(errors.NotAuthorizedError):
            b.delete_group("ab-orders")
    finally:
        a.close()
        b.close()


def test_the_most_specific_admin_entry_owns_a_name() -> None:
    acls = parse_acls(tomllib.loads(ACLS + """
[[acl]]
principal = "User:orders-team"
group = "ab-orders"
operations = ["admin"]

[[acl]]
principal = "User:everyone-admin"
group = "*"
operations = ["admin"]
"""))
    assert prefix_admin(acls, "ab-orders") == "User:orders-team"  # a literal entry over a prefix
    assert prefix_admin(acls, "ab-billing") == "User:tenant-a"
    assert prefix_admin(acls, "b-x") == "User:tenant-b"
    assert prefix_admin(acls, "zz") == ""  # "*" names no owner: the creator stays the account
    assert prefix_admin(None, "ab-orders") == ""
