"""The fuzzed wire of ``test_fuzz_wire.py``, over the Session stream: every body the stream carries, built by
hypothesis from the .proto's descriptors, and raw bytes, against a live coordinator.

The rules: a well-formed envelope never ends the stream and gets its answer under its tag with a defined
``ErrorCode`` (JoinGroup and SyncGroup may be held by the protocol); bytes that are not a usable envelope end
the stream with INVALID_ARGUMENT, never INTERNAL or UNKNOWN; every group passes ``Group.validate()`` after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.rpc.session_envelope import BODIES
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb
from tests.coordinator.rpc.session_client import RawSession
from tests.coordinator.rpc.test_fuzz_wire import CODES, GROUPS, PROFILE, fields_of, validate_all

KINDS = sorted(BODIES.values(), key=lambda body: body.number)
HELD = {"join_group", "sync_group"}
WORDS = [*GROUPS, "", "t0", "round-robin", "sticky", "eager", "consumer", "w", "x" * 300, "bad\nid", "\x00"]


@pytest.fixture(scope="module")
def live() -> Iterator[ServerThread]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               group_max_session_timeout_ms=5_000, group_max_size=8, group_max_tasks=20,
                               group_new_member_join_timeout_ms=1_000, group_empty_retention_ms=2_000)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as server:
        yield server


@pytest.fixture(scope="module")
def channel(live: ServerThread) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(live.address) as made:
        yield made


@pytest.mark.slow
@settings(PROFILE, max_examples=PROFILE.max_examples * 2)
@given(data=st.data(), index=st.integers(0, len(KINDS) - 1))
def test_every_body_gets_a_defined_answer_and_the_stream_lives(live: ServerThread, channel: grpc.Channel,
                                                               data: st.DataObject, index: int) -> None:
    body = KINDS[index]
    request_class = getattr(pb, type(getattr(pb.SessionRequest(), body.name)).__name__)
    fields: dict[str, Any] = data.draw(fields_of(request_class.DESCRIPTOR, WORDS))
    try:
        request = request_class(**fields)
    except (TypeError, ValueError):  # a value protobuf itself refuses (out of range): not sendable
        return
    session = RawSession(channel)
    try:
        tag = session.send(body.name, request)
        try:
            answer = session.answer(tag, timeout=0.3 if body.name in HELD else 10)
        except AssertionError:
            assert body.name in HELD and not session.ended.is_set(), f"{body.name}: no answer, {session.status}"
            return
        assert type(answer) is body.response
        assert answer.error.code in CODES
        follow = session.ask("heartbeat", pb.HeartbeatRequest(group_id="g0", member_id="nobody"))
        assert follow.error.code == pb.UNKNOWN_MEMBER_ID  # the stream lives on
    finally:
        session.cancel()
    validate_all(live)


@pytest.mark.slow
@settings(PROFILE, max_examples=PROFILE.max_examples * 2)
@given(raw=st.one_of(st.binary(max_size=64), st.sampled_from([b"\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x08\x00"])))
def test_raw_bytes_end_the_stream_with_invalid_argument_or_get_an_answer(live: ServerThread, channel: grpc.Channel,
                                                                          raw: bytes) -> None:
    session = RawSession(channel, raw=True)
    try:
        session.send_raw(raw)
        try:
            envelope = pb.SessionRequest.FromString(raw)
        except DecodeError:
            envelope = None
        if envelope is None or envelope.tag == 0:
            assert session.ended_with() == grpc.StatusCode.INVALID_ARGUMENT
            return
        kind = envelope.WhichOneof("body")
        try:
            answer = session.answer(envelope.tag, timeout=0.3 if kind in HELD else 10)
        except AssertionError:
            assert kind in HELD and not session.ended.is_set(), f"{kind}: no answer, {session.status}"
            return
        assert answer is None if kind is None else answer.error.code in CODES
    finally:
        session.cancel()
    validate_all(live)
