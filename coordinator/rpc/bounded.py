"""Other services' handlers (gRPC health), with each request bounded before it is decoded.

gRPC Health is open to every caller (load balancers probe it without credentials), and its
generated deserializer decodes whatever arrives: issue 38 measured four senders of Health/Check with
a 60 MiB service name at a 4.1 GiB peak and 13.2 s of CPU. ``bounded_handlers`` wraps a service's
generic handler so that a request over its bound is answered INVALID_ARGUMENT without being decoded,
and an undecodable one too (gRPC's own deserializer would answer UNKNOWN with a traceback).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

__all__ = ["HEALTH_REQUEST_MAX_BYTES", "bounded_handlers"]

HEALTH_REQUEST_MAX_BYTES = 4_096
"""A health request holds one service name ("groupcoord.v1.GroupCoordinator")."""


class _TooLarge:
    def __init__(self, description: str) -> None:
        self.description = description


def _bounded_parser(parse: Callable[[bytes], Any] | None, limit: int, method: str) -> Callable[[bytes], Any]:
    def bounded(data: bytes) -> Any:
        if len(data) > limit:
            return _TooLarge(f"{method}: {len(data):,} bytes; at most {limit:,} for this method")
        if parse is None:
            return data
        try:
            return parse(data)
        except DecodeError as error:
            return _TooLarge(f"{method}: not a valid request: {error}")

    return bounded


def _bounded(handler: grpc.RpcMethodHandler, limit: int, method: str) -> grpc.RpcMethodHandler:
    """``handler`` with its request bounded (unary requests; streamed ones are left as they are)."""
    deserializer = _bounded_parser(handler.request_deserializer, limit, method)
    serializer = handler.response_serializer
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if isinstance(request, _TooLarge):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.description)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=deserializer,
                                                   response_serializer=serializer)
    if handler.unary_stream is not None:
        inner_stream = handler.unary_stream

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, _TooLarge):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.description)
            async for item in inner_stream(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(streaming, request_deserializer=deserializer,
                                                    response_serializer=serializer)
    return handler


class _BoundedService(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no type information
    def __init__(self, inner: grpc.GenericRpcHandler, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._built: dict[str, tuple[Any, Any]] = {}  # method -> (its handler, the bounded one)

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        handler = self._inner.service(details)
        if handler is None:
            return None
        built = self._built.get(details.method)
        if built is None or built[0] is not handler:
            built = self._built[details.method] = (handler, _bounded(handler, self._limit, details.method))
        return built[1]


def bounded_handlers(handler: grpc.GenericRpcHandler, limit: int) -> grpc.GenericRpcHandler:
    """``handler`` (a service's generic handler) answering requests over ``limit`` bytes with INVALID_ARGUMENT."""
    return _BoundedService(handler, limit)
