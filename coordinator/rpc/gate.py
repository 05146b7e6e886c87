"""Every byte a caller sends is bounded before it is decoded, by the method and by who the caller is.

Issue 38: with ACLs on, a principal with no right on a group could still make the coordinator decode
a 21 MiB PutTasks before it was refused (four senders: peak RSS 1.4 -> 3.3 GiB, 15 s of CPU). Under
the authorization guard, each request that can be large is taken as a stream and read only once
the caller may send it (``gated``):

1. from the metadata and the TLS handshake alone (``Guard.before_reading``): no valid credential, or
   no ACL entry that could allow the method's operation on any group, is refused **unread** (the
   caller can push one HTTP/2 window, 64 KiB, before the refusal);
2. the message is read; one over the method's bound (``request_bounds``) is refused unparsed;
3. the group id it names is read from its **first bytes** (``leading_group_id``: a bounded prefix,
   whatever the body's size) and an id over ``max_id_length`` or a group the principal may not act
   on is refused (``Guard.before_parsing``) with the rest of the body never decoded;
4. only then is the body parsed (off the loop when large) and checked in full (``Guard.admit``: a
   body naming another group further on is refused there; it cost its sender no more than a request
   it had the right to send).

Without a guard (security off) steps 2 and 4 still hold.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from groupcoord.coordinator.auth.guard import Guard
from groupcoord.coordinator.config import CoordinatorConfig

__all__ = ["MAX_FIND_COORDINATOR_GROUPS", "gated", "leading_group_id", "read_varint", "request_bounds", "write_varint"]

MAX_FIND_COORDINATOR_GROUPS = 1_000
"""Group ids one FindCoordinator may ask about (the proto says so too)."""
_SLACK = 64 * 1024  # a request's fields besides the bounded one (ids, numbers, names)
_NESTED_GROUP = frozenset({"PublishLoadSnapshot"})  # its group id is the first field of its first field


def request_bounds(config: CoordinatorConfig) -> dict[str, int]:
    """Full method name -> the most bytes its request may have; methods not named: ``max_message_bytes``.
    Each bound follows from the settings that already limit the request's contents."""
    coordinator, admin = "/groupcoord.v1.GroupCoordinator/", "/groupcoord.v1.GroupAdmin/"
    id_bytes = 4 * config.max_id_length + 3  # UTF-8, with its tag and length
    return {
        coordinator + "JoinGroup": config.max_metadata_bytes + _SLACK,
        coordinator + "FindCoordinator": MAX_FIND_COORDINATOR_GROUPS * id_bytes + _SLACK,
        admin + "PublishLoadSnapshot": config.max_snapshot_bytes + _SLACK,
        admin + "DescribeCluster": _SLACK,
    }


def write_varint(value: int) -> bytes:
    """``value`` (not negative) as a protobuf varint: the envelope and the batches frame bytes by hand."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and where it ends; (-1, at) if it does not end within 10 bytes."""
    value = shift = 0
    for index in range(at, min(at + 10, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index + 1
        shift += 7
    return -1, at


def _first_string(data: bytes, at: int = 0) -> tuple[int, int] | None:
    """(start, length) of field 1 when it is the first field, length-delimited; else None."""
    if at >= len(data) or data[at] != 0x0A:
        return None
    length, start = read_varint(data, at + 1)
    return None if length < 0 else (start, length)


def leading_group_id(method_name: str, data: bytes, max_chars: int) -> tuple[str, int] | None:
    """The group id a request names, read from its first bytes only, and its length in bytes; None
    when it is not its first field (never so as our clients write it: the full check then decides).
    An id longer than ``max_chars`` comes back cut to ``max_chars + 1`` characters, still too long."""
    found = _first_string(data)
    if found is not None and method_name in _NESTED_GROUP:
        found = _first_string(data, found[0])
    if found is None:
        return None
    start, length = found
    cut = min(length, 4 * (max_chars + 1))
    try:
        text = data[start:start + cut].decode()
    except UnicodeDecodeError:  # cut inside a character, or not UTF-8: the full parse decides
        text = data[start:start + cut].decode(errors="replace")
        if cut == length:
            return None
    return text[:max_chars + 1], length


def gated(guard: Guard, method: str, bound: int, max_id_length: int,
          then: Callable[[bytes, grpc.aio.ServicerContext], Awaitable[Any]],
          response_serializer: Callable[[Any], bytes] | None) -> grpc.RpcMethodHandler:
    """The handler of a large method under ``guard``: refusals before reading, then before parsing
    (module docstring), then ``then(bytes, context)`` parses and handles the request."""
    method_name = method.rsplit("/", 1)[-1]

    async def handle(_requests: Any, context: grpc.aio.ServicerContext) -> Any:
        principal, denied = guard.before_reading(method, context)
        if denied is not None:
            await guard.refuse(context, denied)
        data = await context.read()  # not by iterating ``_requests``: its generator would keep the message
        if not isinstance(data, bytes):  # grpc.aio.EOF
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method_name}: no request message")
        size = len(data)
        if size > bound:
            del data  # dropped before the answer: an exception's frames would keep it until a collection
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{method_name}: {size:,} bytes; at most {bound:,} for this method")
        named = leading_group_id(method_name, data, max_id_length)
        if named is not None:
            denied = guard.before_parsing(method, principal, named[0], id_bytes=named[1])
            if denied is not None:
                del data
                await guard.refuse(context, denied, size)
        return await then(data, context)

    # taken as a stream (of one message) so that nothing is read before the first refusal
    return grpc.stream_unary_rpc_method_handler(handle, response_serializer=response_serializer)
