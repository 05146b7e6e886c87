"""Requests of the coordinator's services, parsed from their bytes before anything looks at them.

Parsing is lenient: bad bytes become ``Malformed``, which the servicer answers with
INVALID_ARGUMENT (gRPC's own deserializer would answer UNKNOWN and log a traceback).

Two kinds of method (``SMALL_REQUESTS``):

* **small requests** (Heartbeat, ListGroups, DescribeGroup, DeleteGroup: a few ids, nothing
  repeated) are parsed by gRPC's own deserializer hook, on the loop, at no extra cost per call;
  one of more than ``SMALL_REQUEST_MAX_BYTES`` is ``Malformed`` without being parsed. This is
  the heartbeat hot path: no interceptor, no wrapper.
* **requests that can be large** (a catalog, an assignment, a load report) arrive as bytes; one
  of ``PARSE_OFF_LOOP_FROM`` bytes or more is parsed on a checker thread (a 60 MB message takes a
  good part of a second to parse: on the event loop it would hold every other group's heartbeat)
  and counts against ``max_request_bytes_in_flight`` until it is answered. Without other
  interceptors the servicer's handler does this itself (``method_handler``); with some (the
  authorization guard), ``ParsingInterceptor`` does it first in the chain, so they see parsed
  messages; under the guard it reads them only once the caller may send them
  (``coordinator.rpc.gate``).

Before any parse, a request over its method's bound (``gate.request_bounds``) is refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from groupcoord.coordinator.auth.guard import Guard
from groupcoord.coordinator.rpc.gate import gated, request_bounds
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "Malformed",
    "ParsingInterceptor",
    "PARSE_OFF_LOOP_FROM",
    "SMALL_REQUESTS",
    "SMALL_REQUEST_MAX_BYTES",
    "lenient_parser",
    "method_handler",
    "request_parsers",
]

PARSE_OFF_LOOP_FROM = 256 * 1024
SMALL_REQUESTS = frozenset({"Heartbeat", "ListGroups", "DescribeGroup", "DeleteGroup"})
"""Methods whose requests hold only a few bounded ids: parsed by gRPC's deserializer, on the loop."""
SMALL_REQUEST_MAX_BYTES = 64 * 1024
"""A small request longer than this is malformed (its ids are at most ``max_id_length`` chars)."""


class Malformed:
    """Stands in for a request whose bytes did not parse (answered with INVALID_ARGUMENT)."""

    def __init__(self, type_name: str, error: str) -> None:
        self.description = f"request is not a valid {type_name}: {error}"


def lenient_parser(message_class: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError as error:
            return Malformed(message_class.DESCRIPTOR.full_name, str(error))

    return parse


def _small_parser(message_class: Any) -> Callable[[bytes], Any]:
    """``lenient_parser`` with a size limit, in one call (every heartbeat goes through it)."""
    name = message_class.DESCRIPTOR.full_name
    from_string = message_class.FromString

    def parse_small(data: bytes) -> Any:
        if len(data) > SMALL_REQUEST_MAX_BYTES:
            return Malformed(name, f"{len(data)} bytes; at most {SMALL_REQUEST_MAX_BYTES} for this method")
        try:
            return from_string(data)
        except DecodeError as error:
            return Malformed(name, str(error))

    return parse_small


def request_parsers() -> dict[str, Callable[[bytes], Any]]:
    """Full method name ("/groupcoord.v1.GroupAdmin/PutTasks") -> the parser of its request, for
    the methods whose requests can be large (the others are parsed by their deserializer)."""
    return {
        f"/{service.full_name}/{method.name}": lenient_parser(getattr(pb, method.input_type.name))
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
        if method.name not in SMALL_REQUESTS
    }


def method_handler(service_name: str, method_name: str, behaviour: Callable[..., Awaitable[Any]],
                   runtime: ShardRouter | None) -> grpc.RpcMethodHandler:
    """How a servicer method is registered. ``runtime`` given: a large request's handler parses
    it itself (no interceptor on the server); None: it takes the parsed request from the
    ``ParsingInterceptor``."""
    method = pb.DESCRIPTOR.services_by_name[service_name].methods_by_name[method_name]
    message_class = getattr(pb, method.input_type.name)
    deserializer = None
    if method_name in SMALL_REQUESTS:
        deserializer = _small_parser(message_class)
    elif runtime is not None:
        full_name = f"/{pb.DESCRIPTOR.services_by_name[service_name].full_name}/{method_name}"
        bound = request_bounds(runtime.config).get(full_name, runtime.config.max_message_bytes)
        behaviour = _parsing(runtime, lenient_parser(message_class), behaviour, bound)
    # the answer type's own serializer, as generated code registers it (no Python call around it)
    serializer = getattr(pb, method.output_type.name).SerializeToString
    return grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=deserializer, response_serializer=serializer)


class ParsingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type information
    """Parses the large requests of the coordinator's own services before the interceptors after
    it; the wrapped handler is built once per method, not per call. With ``guard``, a large request is
    read only once the guard lets its caller send it, and refused before parsing when the group it
    names is not the caller's (``coordinator.rpc.gate``)."""

    def __init__(self, runtime: ShardRouter, guard: Guard | None = None) -> None:
        self._runtime = runtime
        self._guard = guard
        self._bounds = request_bounds(runtime.config)
        self._parsers = request_parsers()
        self._wrapped: dict[str, tuple[Any, Any]] = {}  # method -> (its handler, the parsing one)

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails
    ) -> Any:
        handler = await continuation(details)
        method = details.method
        parse = self._parsers.get(method)
        if handler is None or parse is None or handler.unary_unary is None:
            return handler
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        bound = self._bounds.get(method, self._runtime.config.max_message_bytes)
        then = _parsing(self._runtime, parse, handler.unary_unary, bound)
        if self._guard is not None:
            wrapped = gated(self._guard, method, bound, self._runtime.config.max_id_length, then,
                            handler.response_serializer)
        else:
            wrapped = grpc.unary_unary_rpc_method_handler(
                then,
                request_deserializer=None,  # the bytes as received
                response_serializer=handler.response_serializer,
            )
        self._wrapped[method] = (handler, wrapped)
        return wrapped


def _parsing(runtime: ShardRouter, parse: Callable[[bytes], Any],
             handle: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
             bound: int) -> Callable[..., Awaitable[Any]]:
    async def handler(data: bytes, context: grpc.aio.ServicerContext) -> Any:
        size = len(data)
        if size > bound:
            del data  # dropped before the answer (an exception's frames would keep it until a collection)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{size:,} bytes; at most {bound:,} for this method")
        if size < PARSE_OFF_LOOP_FROM:
            return await handle(parse(data), context)
        if not runtime.large_requests.admit(size):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"too many large requests at once (max_request_bytes_in_flight "
                                f"{runtime.config.max_request_bytes_in_flight}); retry shortly")
        try:
            return await handle(await runtime.checkers.run(parse, data), context)
        finally:
            runtime.large_requests.release(size)

    return handler
