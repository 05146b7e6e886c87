"""A fuzzed wire against a live coordinator: every request message of both services, built by
hypothesis from the .proto's descriptors, mixed with well-formed join/sync/heartbeat sequences that
use the ids and generations the server hands out, and raw bytes.

After every step: each answer carries a defined ``ErrorCode`` (a gRPC status only for bytes that
do not parse: INVALID_ARGUMENT; never INTERNAL or UNKNOWN), the server still answers, and every
group passes ``Group.validate()`` (run on the server's loop). JoinGroup and SyncGroup may be held
by the protocol; they run as futures and are judged when they finish (or are cancelled).

Profiles: ``ci`` (default, bounded) and ``chaos`` (``HYPOTHESIS_PROFILE=chaos``, what `make chaos` runs).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.rpc.server import ServerThread
from groupcoord.coordinator.runtime.runtime import CoordinatorRuntime
from groupcoord.v1 import groupcoord_pb2 as pb

settings.register_profile("ci", max_examples=25, stateful_step_count=25, deadline=None,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("chaos", max_examples=400, stateful_step_count=40, deadline=None,
                          suppress_health_check=list(HealthCheck))
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SERVICES = ("GroupCoordinator", "GroupAdmin")
METHODS = [(service, m) for service in SERVICES for m in pb.DESCRIPTOR.services_by_name[service].methods
           if not m.client_streaming]  # Session: its own fuzzing (test_session_stream.py)
HELD = {"JoinGroup", "SyncGroup"}  # the protocol may hold these (answered when the phase ends)
CODES = set(pb.ErrorCode.values())
SEEN: Counter[str] = Counter()  # (method, answer) -> count: what the fuzzer reached (printed with -s)
GROUPS = ["g0", "g1", "g2"]
# "@0".."@3" stand for member ids the server handed out (filled in when the request is sent, so what
# hypothesis draws never depends on the server's answers)
WORDS = GROUPS + ["", "t0", "t1", "t2", "round-robin", "sticky", "eager", "cooperative", "consumer", "w", "x" * 300,
                  "bad\nid", "\x00", "@0", "@1", "@2", "@3"]
CALL_TIMEOUT_S = 5.0


def ints(bits: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([0, 1, -1, 2, 200, 500, 3000, 60_000]),
                     st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1))


def scalar(field: FieldDescriptor, words: list[str]) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return st.one_of(st.sampled_from(words), st.text(max_size=12))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=24)
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return ints(32)
    if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return ints(64)
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if t == FieldDescriptor.TYPE_DOUBLE else 32)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_ENUM:
        return st.integers(0, max(v.number for v in field.enum_type.values) + 2)  # open enums: unknown values too
    raise AssertionError(f"no strategy for {field.full_name}")


def fields_of(descriptor: Descriptor, words: list[str], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for ``descriptor``'s class: any subset of its fields, nested to depth 3."""
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth >= 3:
                continue
            entry = field.message_type
            if entry.GetOptions().map_entry:
                key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
                optional[field.name] = st.dictionaries(scalar(key, words), scalar(value, words), max_size=3)
                continue
            inner = fields_of(entry, words, depth + 1)
            optional[field.name] = st.lists(inner, max_size=3) if _repeated(field) else inner
        else:
            optional[field.name] = st.lists(scalar(field, words), max_size=4) if _repeated(field) \
                else scalar(field, words)
    return st.fixed_dictionaries({}, optional=optional)


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated) if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED


def request_class(method: Any) -> type[Message]:
    return getattr(pb, method.input_type.name)  # type: ignore[no-any-return]


def response_class(method: Any) -> type[Message]:
    return getattr(pb, method.output_type.name)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def live() -> Iterator[ServerThread]:
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=200,
                               group_max_session_timeout_ms=5_000, group_max_size=8, group_max_tasks=20,
                               group_new_member_join_timeout_ms=1_000, group_empty_retention_ms=2_000)
    # every persisted change re-checks its group too (a broken invariant then surfaces as INTERNAL)
    with ServerThread(CoordinatorRuntime(config, on_change=lambda group: group.validate())) as server:
        yield server


class Wire:
    """Raw calls to every method of a live server (bytes in, bytes out)."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.calls = {
            method.name: self.channel.unary_unary(f"/{pb.DESCRIPTOR.package}.{service}/{method.name}",
                                                  request_serializer=None, response_deserializer=None)
            for service, method in METHODS
        }

    def close(self) -> None:
        self.channel.close()


def judge(method: Any, outcome: Any, *, raw: bytes | None = None) -> Message | None:
    """The rules every answer keeps; returns the parsed response (None: a gRPC status)."""
    if isinstance(outcome, grpc.RpcError):
        code = outcome.code()
        if raw is not None and code == grpc.StatusCode.INVALID_ARGUMENT:
            try:
                request_class(method).FromString(raw)
            except DecodeError:
                return None  # bytes that do not parse: INVALID_ARGUMENT, as promised
            raise AssertionError(f"{method.name}: parseable bytes refused: {outcome.details()}")
        if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED) and method.name in HELD:
            return None  # held by the protocol past our patience
        raise AssertionError(f"{method.name}: gRPC {code.name}: {outcome.details()}")
    response = response_class(method).FromString(outcome)
    assert response.error.code in CODES, f"{method.name}: undefined error code {response.error.code}"
    SEEN[f"{method.name} {pb.ErrorCode.Name(response.error.code)}"] += 1
    return response


def validate_all(server: ServerThread) -> None:
    def check() -> int:
        for group in server.runtime.groups.values():
            group.validate()
        return len(server.runtime.groups)

    server.call(check)


class FuzzedWire(RuleBasedStateMachine):
    server: ServerThread

    def __init__(self) -> None:
        super().__init__()
        self.wire = Wire(self.server.address)
        self.pending: list[tuple[Any, Any]] = []  # (method, future) of held calls
        self.members: list[tuple[str, str, int]] = []  # (group, member id, generation) the server handed out
        self.by_name = {m.name: m for _, m in METHODS}

    def known(self, index: int) -> tuple[str, str, int]:
        """The ``index``-th (mod) member the server handed out, or a made-up one."""
        return self.members[index % len(self.members)] if self.members else ("g0", "nobody", 1)

    def fill(self, value: Any) -> Any:
        if isinstance(value, str) and len(value) == 2 and value[0] == "@" and value[1].isdigit():
            return self.known(int(value[1]))[1]
        if isinstance(value, dict):
            return {self.fill(k): self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return value

    def call(self, name: str, request: Message) -> Message | None:
        method = self.by_name[name]
        future = self.wire.calls[name].future(request.SerializeToString(), timeout=CALL_TIMEOUT_S)
        if name in HELD:
            try:
                outcome = future.result(timeout=0.1)
            except grpc.FutureTimeoutError:
                self.pending.append((method, future))
                return None
            except grpc.RpcError as failure:
                outcome = failure
        else:
            try:
                outcome = future.result()
            except grpc.RpcError as failure:
                outcome = failure
        response = judge(method, outcome)
        self.learn(name, response)
        return response

    def learn(self, name: str, response: Message | None) -> None:
        if name == "JoinGroup" and response is not None and response.member_id:  # type: ignore[attr-defined]
            self.members.append(("?", response.member_id, response.generation))  # type: ignore[attr-defined]
            self.members = self.members[-20:]

    @rule(data=st.data(), index=st.integers(0, len(METHODS) - 1))
    def any_request(self, data: st.DataObject, index: int) -> None:
        """Any request message, any fields (ids often the server's own)."""
        _, method = METHODS[index]
        kwargs = data.draw(fields_of(method.input_type, WORDS), label=method.name)
        self.call(method.name, request_class(method)(**self.fill(kwargs)))

    @rule(group=st.sampled_from(GROUPS), cooperative=st.booleans(), tasks=st.lists(st.sampled_from(["t0", "t1", "t2"]),
                                                                                   max_size=3, unique=True))
    def join_and_sync(self, group: str, cooperative: bool, tasks: list[str]) -> None:
        """The well-formed path: join, join again with the id given, sync (the leader assigns)."""
        if tasks:
            self.call("PutTasks", pb.PutTasksRequest(group_id=group, tasks=[pb.Task(task_id=t) for t in tasks]))
        join = pb.JoinGroupRequest(group_id=group, client_id="fz", session_timeout_ms=1_000, rebalance_timeout_ms=300,
                                   protocols=["round-robin"],
                                   rebalance_protocols=["eager", "cooperative"] if cooperative else ["eager"])
        first = self.call("JoinGroup", join)
        if first is None or first.error.code != pb.MEMBER_ID_REQUIRED:  # type: ignore[attr-defined]
            return
        join.member_id = first.member_id  # type: ignore[attr-defined]
        joined = self.call("JoinGroup", join)
        if joined is None or joined.error.code != pb.NONE:  # type: ignore[attr-defined]
            return
        self.members.append((group, joined.member_id, joined.generation))  # type: ignore[attr-defined]
        sync = pb.SyncGroupRequest(group_id=group, member_id=joined.member_id,  # type: ignore[attr-defined]
                                   generation=joined.generation)  # type: ignore[attr-defined]
        if joined.leader_id == joined.member_id:  # type: ignore[attr-defined]
            everyone = [m.member_id for m in joined.members]  # type: ignore[attr-defined]
            catalog = [t.task_id for t in joined.tasks]  # type: ignore[attr-defined]
            for i, member in enumerate(everyone):
                mine = [pb.TaskReplica(task_id=t) for j, t in enumerate(catalog) if j % len(everyone) == i]
                sync.assignments.append(pb.MemberAssignment(member_id=member, tasks=mine))
        self.call("SyncGroup", sync)

    @rule(index=st.integers(0, 19), fallback=st.sampled_from(GROUPS), heartbeat=st.booleans())
    def heartbeat_or_leave(self, index: int, fallback: str, heartbeat: bool) -> None:
        """Heartbeats and leaves with real (maybe stale) ids and generations."""
        group, member, generation = self.known(index)
        group = group if group != "?" else fallback
        if heartbeat:
            self.call("Heartbeat", pb.HeartbeatRequest(group_id=group, member_id=member, generation=generation))
        else:
            self.call("LeaveGroup", pb.LeaveGroupRequest(group_id=group, member_id=member))

    @invariant()
    def answers_and_groups_hold(self) -> None:
        still = []
        for method, future in self.pending:
            if not future.done():
                still.append((method, future))
                continue
            try:
                outcome = future.result()
            except grpc.RpcError as failure:
                outcome = failure
            self.learn(method.name, judge(method, outcome))
        self.pending = still
        validate_all(self.server)

    def teardown(self) -> None:
        for _, future in self.pending:
            future.cancel()
        alive = pb.ListGroupsResponse.FromString(self.wire.calls["ListGroups"](b"", timeout=CALL_TIMEOUT_S))
        assert alive.error.code == pb.NONE, "the server still answers"
        self.wire.close()


@pytest.mark.slow
@pytest.mark.heavy  # hypothesis over a live server: 29-31 s of CPU (test_session_fuzz stays in make test)
def test_fuzzed_requests_and_sequences_keep_every_rule(live: ServerThread) -> None:
    FuzzedWire.server = live
    run_state_machine_as_test(FuzzedWire, settings=PROFILE)
    validate_all(live)
    print("answers seen:", dict(sorted(SEEN.items())))


@pytest.mark.slow
@settings(PROFILE, max_examples=PROFILE.max_examples * 4)
@given(index=st.integers(0, len(METHODS) - 1), raw=st.one_of(st.binary(max_size=64),
                                                             st.sampled_from([b"\xff", b"\x0a\xff\xff\xff\xff\x0f"])))
def test_raw_bytes_get_invalid_argument_or_a_defined_code(live: ServerThread, index: int, raw: bytes) -> None:
    _, method = METHODS[index]
    wire = Wire(live.address)
    try:
        try:
            outcome: Any = wire.calls[method.name](raw, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as failure:
            outcome = failure
        judge(method, outcome, raw=raw)
        validate_all(live)
    finally:
        wire.close()
