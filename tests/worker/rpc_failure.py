"""A failed gRPC call as the transports and streams see one: a ``grpc.RpcError`` with a status and details."""

from __future__ import annotations

import grpc


class RpcFailure(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "said no") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details
