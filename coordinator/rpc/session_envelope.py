"""The Session stream's envelopes (``SessionRequest``/``SessionResponse``), read and written around their bodies.

An answer is written as its envelope's bytes put in front of the body's own serialisation (the
body is never copied into a ``SessionResponse`` first), so a stream's buffered byte count is exact.
A request's tag, body kind and group id can be read from its **first bytes** (``peek``), as our
clients write it (tag first, then the body, whose first field is the group id): so an oversized
message is answered under its tag, and a large one refused by the ACLs, without decoding it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from google.protobuf.message import Message

from groupcoord.coordinator.rpc.gate import leading_group_id, read_varint, write_varint
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["BATCH_METADATA", "BODIES", "MAX_BATCH", "Body", "Peek", "SESSION_METHOD", "batch_refusal", "frame",
           "news_frame", "peek"]

SESSION_METHOD = "/groupcoord.v1.GroupCoordinator/Session"
BATCH_METADATA = "groupcoord-session-batch"
"""In a client's call metadata: it reads batched answers; in the coordinator's initial metadata: it reads
batched requests (``SessionRequest.batch``, ``SessionResponse.batch``)."""
MAX_BATCH = 1_000
"""Requests in one batch at most (each is stepped on the loop before the next read)."""
ENVELOPE_SLACK = 32
"""Bytes an envelope adds to its body at most (tag, field key, length)."""


@dataclass(frozen=True, slots=True)
class Body:
    """One kind of request a stream carries: its field in both envelopes and its unary twin."""

    name: str  # the oneof field's name, the same in SessionRequest and SessionResponse
    number: int
    method: str  # the unary twin's full method name (its guard rule, its bound)
    response: type[Message]

    @property
    def method_name(self) -> str:
        return self.method.rsplit("/", 1)[-1]


def _bodies() -> dict[int, Body]:
    request = pb.SessionRequest.DESCRIPTOR
    answers = pb.SessionResponse.DESCRIPTOR.fields_by_name
    found = {}
    for field in request.oneofs_by_name["body"].fields:
        asked, answered = field.message_type, answers[field.name].message_type
        assert asked is not None and answered is not None
        twin = asked.name.removesuffix("Request")
        found[field.number] = Body(field.name, field.number, f"/groupcoord.v1.GroupCoordinator/{twin}",
                                   getattr(pb, answered.name))
    return found


BODIES: dict[int, Body] = _bodies()


def frame(tag: int, number: int, body: bytes) -> bytes:
    """A SessionResponse carrying ``body`` (a serialised answer) in field ``number``, under ``tag``."""
    head = (b"\x08" + write_varint(tag) if tag else b"") + write_varint(number << 3 | 2) + write_varint(len(body))
    return head + body


def batch_refusal(envelope: pb.SessionRequest) -> str | None:
    """Why a batch cannot be read (the stream ends INVALID_ARGUMENT), or None."""
    if envelope.tag or envelope.WhichOneof("body") is not None:
        return "a batch carries its requests in `batch` only: no tag or body of its own"
    if len(envelope.batch) > MAX_BATCH:
        return f"a batch of {len(envelope.batch):,} requests: at most {MAX_BATCH:,}"
    if any(inner.batch for inner in envelope.batch):
        return "a batch inside a batch"
    return None


def news_frame(news: pb.SessionNews) -> bytes:
    return pb.SessionResponse(news=news).SerializeToString()


class Peek(NamedTuple):
    tag: int
    body: Body | None  # None: the body is not the next field (or not one we know)
    group_id: str | None  # cut to max_chars + 1 characters; None: not readable from the first bytes
    id_bytes: int


def peek(data: bytes, max_chars: int) -> Peek | None:
    """The tag, body kind and group id of a request from its first bytes; None when its tag is not its
    first field (never so as our clients write it: the full parse decides then)."""
    if not data or data[0] != 0x08:
        return None
    tag, at = read_varint(data, 1)
    if tag <= 0:
        return None
    key, start = read_varint(data, at)
    body = BODIES.get(key >> 3) if key >= 0 and key & 7 == 2 else None
    if body is None:
        return Peek(tag, None, None, -1)
    length, start = read_varint(data, start)
    if length < 0:
        return Peek(tag, body, None, -1)
    named = leading_group_id("", data[start:start + min(length, 4 * (max_chars + 1) + 16)], max_chars)
    if named is None:
        return Peek(tag, body, None, -1)
    return Peek(tag, body, named[0], named[1])
