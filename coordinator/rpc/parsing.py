"""Requests of the coordinator's services, parsed from their bytes before anything looks at them.

An interceptor, always the first in the server's chain: the authorization guard after it (and the
servicers) see parsed messages. Parsing is lenient: bad bytes become ``Malformed``, which the
servicer answers with INVALID_ARGUMENT (gRPC's own deserializer would answer UNKNOWN and log a
traceback). A request of ``PARSE_OFF_LOOP_FROM`` bytes or more is parsed on a checker thread (a
60 MB message takes a good part of a second to parse: on the event loop it would hold every other
group's heartbeat) and counts against ``max_request_bytes_in_flight`` until it is answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Malformed", "ParsingInterceptor", "PARSE_OFF_LOOP_FROM", "lenient_parser", "request_parsers"]

PARSE_OFF_LOOP_FROM = 256 * 1024


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


def request_parsers() -> dict[str, Callable[[bytes], Any]]:
    """Full method name ("/groupcoord.v1.GroupAdmin/PutTasks") -> the parser of its request."""
    return {
        f"/{service.full_name}/{method.name}": lenient_parser(getattr(pb, method.input_type.name))
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


class ParsingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type information
    """Parses the requests of the coordinator's own services (their handlers take bytes)."""

    def __init__(self, runtime: ShardRouter) -> None:
        self._runtime = runtime
        self._parsers = request_parsers()

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: grpc.HandlerCallDetails
    ) -> Any:
        handler = await continuation(details)
        parse = self._parsers.get(details.method)
        if handler is None or parse is None or handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            _parsing(self._runtime, parse, handler.unary_unary),
            request_deserializer=None,  # the bytes as received
            response_serializer=handler.response_serializer,
        )


def _parsing(runtime: ShardRouter, parse: Callable[[bytes], Any],
             handle: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(data: bytes, context: grpc.aio.ServicerContext) -> Any:
        size = len(data)
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
