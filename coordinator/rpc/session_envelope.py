"""The Session stream's envelopes (``SessionRequest``/``SessionResponse``), read and written around their bodies.

An answer is written as its envelope's bytes put in front of the body's own serialisation (the
body is never copied into a ``SessionResponse`` first), so a stream's buffered byte count is exact.
A request's tag, body kind and group id can be read from its **first bytes** (``peek``), as our
clients write it (tag first, then the body, whose first field is the group id): so an oversized
message is answered under its tag, and a large one refused by the ACLs, without decoding it.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

from google.protobuf.message import Message

from groupcoord.coordinator.rpc.gate import leading_group_id, read_varint, write_varint
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["BATCH_METADATA", "BODIES", "MAX_BATCH", "Body", "Peek", "SESSION_METHOD", "batch_refusal", "frame",
           "news_frame", "peek", "rebalance_started_frames", "varint"]

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
    method_name: str  # the twin's name alone ("JoinGroup"): asked per message, so kept rather than cut each time
    key: bytes  # the body's field key in a SessionResponse (field ``number``, length-delimited)


def _bodies() -> dict[int, Body]:
    request = pb.SessionRequest.DESCRIPTOR
    answers = pb.SessionResponse.DESCRIPTOR.fields_by_name
    found = {}
    for field in request.oneofs_by_name["body"].fields:
        asked, answered = field.message_type, answers[field.name].message_type
        assert asked is not None and answered is not None
        twin = asked.name.removesuffix("Request")
        found[field.number] = Body(field.name, field.number, f"/groupcoord.v1.GroupCoordinator/{twin}",
                                   getattr(pb, answered.name), twin, write_varint(field.number << 3 | 2))
    return found


BODIES: dict[int, Body] = _bodies()


_ONE_BYTE = tuple(bytes((value,)) for value in range(128))
_NEWS_KEY = write_varint(pb.SessionResponse.DESCRIPTOR.fields_by_name["news"].number << 3 | 2)


def varint(value: int) -> bytes:
    """``value`` (not negative) as a protobuf varint; up to three bytes with no loop (an answer's frame takes
    two, its tag and its length, and a rebalance of 1,000 members writes 3,000 frames)."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    return write_varint(value)


def frame(tag: int, key: bytes, body: bytes) -> bytes:
    """A SessionResponse carrying ``body`` (a serialised answer) under the field key ``key`` (``Body.key``),
    under ``tag``."""
    if not tag:
        return key + varint(len(body)) + body
    return b"\x08" + varint(tag) + key + varint(len(body)) + body


def rebalance_started_frames(group_id: str, generation: int, member_ids: list[str]) -> list[bytes]:
    """For each of ``member_ids``, the news frame ``SessionNews{group_id, member_id, rebalance_started{generation}}``
    as protobuf writes it (fields in order, defaults left out), encoded by hand: what every member is told is
    the same but its id, so the shared parts are made once (a message built and serialised per member was
    a twentieth of the coordinator's CPU in a rebalance of 1,000 members on streams)."""
    if generation < 0:  # (never: a negative int32 takes ten bytes; protobuf writes it)
        return [news_frame(pb.SessionNews(group_id=group_id, member_id=member_id,
                                          rebalance_started=pb.RebalanceStarted(generation=generation)))
                for member_id in member_ids]
    name = group_id.encode()
    started = b"\x08" + varint(generation) if generation else b""
    group_part = (b"\x0a" + varint(len(name)) + name) if name else b""
    tail = b"\x52" + varint(len(started)) + started  # field 10 (rebalance_started), always present: the oneof's case
    frames = []
    for member_id in member_ids:
        member = member_id.encode()
        news = group_part + (b"\x12" + varint(len(member)) + member if member else b"") + tail
        frames.append(_NEWS_KEY + varint(len(news)) + news)
    return frames


_BATCH = attrgetter("batch")


def batch_refusal(envelope: pb.SessionRequest) -> str | None:
    """Why a batch cannot be read (the stream ends INVALID_ARGUMENT), or None."""
    if envelope.tag or envelope.WhichOneof("body") is not None:
        return "a batch carries its requests in `batch` only: no tag or body of its own"
    if len(envelope.batch) > MAX_BATCH:
        return f"a batch of {len(envelope.batch):,} requests: at most {MAX_BATCH:,}"
    if any(map(_BATCH, envelope.batch)):  # (no generator frame: a third less per request)
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
