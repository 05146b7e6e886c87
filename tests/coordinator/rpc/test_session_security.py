"""The Session stream under TLS, tokens (or mTLS) and ACLs, over a real gRPC server on loopback: the credential
checked once at open with nothing decoded before, each message's group and members checked as its unary twin's
(the refusal is that message's answer and the stream lives on), and the quota of streams per principal."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from groupcoord.coordinator.auth.acl import parse_acls
from groupcoord.coordinator.auth.guard import Guard, Policy
from groupcoord.coordinator.auth.tokens import parse_tokens
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.rpc.session_client import RawSession
from tests.coordinator.rpc.test_session_stream import join_request
from tests.security_pki import Pki, Tokens, subject

ACLS = """
[[acl]]
principal = "User:w1"
group = "g"
operations = ["member"]

[[acl]]
principal = "User:w2"
group = "g"
operations = ["member"]

[[acl]]
principal = "User:CN=w3,OU=shop,O=Example"
group = "g"
operations = ["member"]

[[acl]]
principal = "User:reader"
group = "g"
operations = ["describe"]
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    made = Tokens(tmp_path_factory.mktemp("tokens"))
    for name in ("w1", "w2", "reader", "unknown"):
        made.new(name)
    made.server_file(["w1", "w2", "reader"])
    return made


def _server(pki: Pki, tokens: Tokens | None) -> ServerThread:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               session_max_streams_per_principal=2)
    runtime = CoordinatorRuntime(config)
    table = parse_tokens((tokens.root / "tokens").read_text()) if tokens is not None else None
    guard = Guard(Policy(mtls=tokens is None, tokens=table, acls=parse_acls(tomllib.loads(ACLS))),
                  owner_of=runtime.model.member_principal)
    return ServerThread(runtime, credentials=pki.server_credentials(mtls=tokens is None), interceptors=[guard])


@pytest.fixture
def secured(pki: Pki, tokens: Tokens) -> Iterator[tuple[ServerThread, grpc.Channel]]:
    with _server(pki, tokens) as server, \
            grpc.secure_channel(server.address, grpc.ssl_channel_credentials(pki.ca_file.read_bytes())) as channel:
        yield server, channel


def bearer(tokens: Tokens, name: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {tokens.tokens[name]}")]


@pytest.mark.parametrize("who", [None, "unknown"])
def test_no_valid_token_is_refused_at_open_with_nothing_decoded(secured: tuple[ServerThread, grpc.Channel],
                                                                 tokens: Tokens, who: str | None) -> None:
    server, channel = secured
    session = RawSession(channel, [] if who is None else bearer(tokens, who), raw=True)
    session.send_raw(b"\xff" * 1_000)  # not a SessionRequest: decoded, it would end the stream INVALID_ARGUMENT
    assert session.ended_with() == grpc.StatusCode.UNAUTHENTICATED
    assert server.call(lambda: len(server.runtime.groups)) == 0


def test_a_principal_with_no_member_right_anywhere_is_refused_at_open(secured: tuple[ServerThread, grpc.Channel],
                                                                     tokens: Tokens) -> None:
    _, channel = secured
    session = RawSession(channel, bearer(tokens, "reader"), raw=True)
    session.send_raw(b"\xff" * 1_000)
    assert session.ended_with() == grpc.StatusCode.PERMISSION_DENIED
    assert session.status is not None and "may not member any group" in (session.status.details() or "")


def test_a_message_for_a_group_without_the_right_is_refused_and_the_stream_lives_on(
        secured: tuple[ServerThread, grpc.Channel], tokens: Tokens) -> None:
    server, channel = secured
    session = RawSession(channel, bearer(tokens, "w1"))
    refused = session.ask("join_group", join_request("other"))
    assert refused.error.code == pb.GROUP_AUTHORIZATION_FAILED
    assert "User:w1 may not member group 'other'" in refused.error.message
    again = session.ask("heartbeat", pb.HeartbeatRequest(group_id="other", member_id="m"))  # the cached verdict
    assert again.error.code == pb.GROUP_AUTHORIZATION_FAILED
    too_long = session.ask("heartbeat", pb.HeartbeatRequest(group_id="x" * 300, member_id="m"))
    assert too_long.error.code == pb.INVALID_REQUEST and "max_id_length" in too_long.error.message
    first = session.ask("join_group", join_request("g"))
    assert first.error.code == pb.MEMBER_ID_REQUIRED  # the stream lives on, for the group it may act on
    joined = session.ask("join_group", join_request("g", first.member_id))
    assert joined.error.code == pb.NONE
    assert server.call(lambda: sorted(server.runtime.groups)) == ["g"]

    # another principal with `member` on g may not act for w1's member, on its own stream
    other = RawSession(channel, bearer(tokens, "w2"))
    borrowed = other.ask("leave_group", pb.LeaveGroupRequest(group_id="g", member_id=joined.member_id))
    assert borrowed.error.code == pb.GROUP_AUTHORIZATION_FAILED and "another principal joined it" in \
        borrowed.error.message
    assert server.call(lambda: joined.member_id in server.runtime.groups["g"].members)


def test_a_large_message_for_a_group_without_the_right_is_refused_before_decoding(
        secured: tuple[ServerThread, grpc.Channel], tokens: Tokens) -> None:
    _, channel = secured
    session = RawSession(channel, bearer(tokens, "w1"), raw=True)
    large = pb.SessionRequest(tag=9, join_group=join_request("other")).SerializeToString()
    large = large[:-2] + b"\xff" * 300_000  # past its group id, bytes that would not decode
    session.send_raw(large)
    answer = session.answer(9)
    assert answer.error.code == pb.GROUP_AUTHORIZATION_FAILED  # from its first bytes, not INVALID_ARGUMENT
    session.send_raw(pb.SessionRequest(tag=10, join_group=join_request("g")).SerializeToString())
    assert session.answer(10).error.code == pb.MEMBER_ID_REQUIRED


def test_streams_count_in_a_quota_per_principal(secured: tuple[ServerThread, grpc.Channel], tokens: Tokens) -> None:
    _, channel = secured
    held = [RawSession(channel, bearer(tokens, "w1")) for _ in range(2)]
    for session in held:
        assert session.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id="m")) is not None  # both open
    third = RawSession(channel, bearer(tokens, "w1"))
    assert third.ended_with() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert third.status is not None and "session_max_streams_per_principal" in (third.status.details() or "")
    other = RawSession(channel, bearer(tokens, "w2"))  # another principal's quota is its own
    assert other.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id="m")).error.code == \
        pb.UNKNOWN_MEMBER_ID
    held[0].cancel()
    again = RawSession(channel, bearer(tokens, "w1"))
    answer = None
    for _ in range(50):  # the cancelled stream's place comes back once the server has seen it end
        answer = again.ask("heartbeat", pb.HeartbeatRequest(group_id="g", member_id="m")) if not again.ended.is_set() \
            else None
        if answer is not None:
            break
        again = RawSession(channel, bearer(tokens, "w1"))
    assert answer is not None and answer.error.code == pb.UNKNOWN_MEMBER_ID


def test_an_mtls_peer_is_its_principal_on_the_stream(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.client("w3")
    other_cert, other_key = pki.client("w4")
    with _server(pki, None) as server:
        def channel(cert: Path, key: Path) -> grpc.Channel:
            return grpc.secure_channel(server.address, grpc.ssl_channel_credentials(
                pki.ca_file.read_bytes(), key.read_bytes(), cert.read_bytes()))

        with channel(cert, key) as allowed, channel(other_cert, other_key) as stranger:
            session = RawSession(allowed)
            first = session.ask("join_group", join_request("g"))
            assert first.error.code == pb.MEMBER_ID_REQUIRED
            joined = session.ask("join_group", join_request("g", first.member_id))
            assert server.call(lambda: server.runtime.groups["g"].members[joined.member_id].principal) == \
                subject("w3")
            refused = RawSession(stranger)
            refused.send("heartbeat", pb.HeartbeatRequest(group_id="g", member_id=joined.member_id))
            assert refused.ended_with() == grpc.StatusCode.PERMISSION_DENIED
