"""Other services' handlers (gRPC health), with each request bounded before it is decoded.

gRPC Health is open to every caller (load balancers probe it without credentials), and its
generated deserializer decodes whatever arrives: issue 38 measured four senders of Health/Check with
a 60 MiB service name at a 4.1 GiB peak and 13.2 s of CPU. ``bounded_handlers`` wraps a service's
generic handler so that a request over its bound is answered INVALID_ARGUMENT without being decoded,
after the refusal pause for the bytes it read (as the guard's refusals), and an undecodable one too
(gRPC's own deserializer would answer UNKNOWN with a traceback).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from groupcoord.coordinator.auth.refusals import RefusalDelay

__all__ = ["HEALTH_REQUEST_MAX_BYTES", "bounded_handlers"]

HEALTH_REQUEST_MAX_BYTES = 4_096
"""A health request holds one service name ("groupcoord.v1.GroupCoordinator")."""


def _bounded(handler: grpc.RpcMethodHandler, limit: int, method: str, delay: _Delay) -> grpc.RpcMethodHandler:
    """``handler`` with its request read as bytes, bounded, then parsed (unary requests; streamed ones
    are left as they are). Taken as a stream of one message, so a refused request is dropped before
    the refusal's pause instead of being held by gRPC until the handler returns."""
    parse = handler.request_deserializer
    serializer = handler.response_serializer

    async def request(context: grpc.aio.ServicerContext) -> Any:
        data = await context.read()
        if not isinstance(data, bytes):  # grpc.aio.EOF
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: no request message")
        size = len(data)
        if size > limit:
            del data
            await delay.pause(size)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{method}: {size:,} bytes; at most {limit:,} for this method")
        try:
            return data if parse is None else parse(data)
        except DecodeError as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method}: not a valid request: {error}")

    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(_requests: Any, context: grpc.aio.ServicerContext) -> Any:
            return await inner(await request(context), context)

        return grpc.stream_unary_rpc_method_handler(unary, response_serializer=serializer)
    if handler.unary_stream is not None:
        inner_stream = handler.unary_stream

        async def streaming(_requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for item in inner_stream(await request(context), context):
                yield item

        return grpc.stream_stream_rpc_method_handler(streaming, response_serializer=serializer)
    return handler


class _Delay:
    """The refusal pause (``coordinator.auth.refusals``) with the server's base delay."""

    def __init__(self, delay_s: float) -> None:
        self._delay_s = delay_s
        self._pauses = RefusalDelay()

    async def pause(self, read_bytes: int) -> None:
        await self._pauses.pause(self._delay_s, read_bytes)


class _BoundedService(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no type information
    def __init__(self, inner: grpc.GenericRpcHandler, limit: int, delay: _Delay) -> None:
        self._inner = inner
        self._limit = limit
        self._delay = delay
        self._built: dict[str, tuple[Any, Any]] = {}  # method -> (its handler, the bounded one)

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        handler = self._inner.service(details)
        if handler is None:
            return None
        built = self._built.get(details.method)
        if built is None or built[0] is not handler:
            built = self._built[details.method] = (handler, _bounded(handler, self._limit, details.method,
                                                                          self._delay))
        return built[1]


def bounded_handlers(handler: grpc.GenericRpcHandler, limit: int, delay_s: float = 0.0) -> grpc.GenericRpcHandler:
    """``handler`` (a service's generic handler) answering requests over ``limit`` bytes with INVALID_ARGUMENT,
    after the refusal pause for ``delay_s`` and the bytes read (``coordinator.auth.refusals``)."""
    return _BoundedService(handler, limit, _Delay(delay_s))
