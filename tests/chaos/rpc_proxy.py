"""A gRPC proxy that forwards every call to the coordinator and can hold one method's calls.

``FaultProxy`` works on TCP bytes and cannot tell a JoinGroup from a heartbeat; this one works on
calls (raw bytes in, raw bytes out, so it needs no knowledge of the messages):

    with RpcProxy(server.address) as proxy:      # one worker dials proxy.address
        proxy.hold("JoinGroup")                  # its next JoinGroup vanishes (till its deadline)
        proxy.hold("SyncGroup", forward_after_s=1.5, answer_after_s=1.0)  # late there, late back

``held`` is set once a held call arrived (a test waits on it instead of sleeping).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Self

import grpc

__all__ = ["RpcProxy"]


@dataclass
class _Hold:
    method: str
    forward_after_s: float | None  # None: never forwarded
    answer_after_s: float
    arrived: threading.Event = field(default_factory=threading.Event)


class RpcProxy(grpc.GenericRpcHandler):
    def __init__(self, upstream: str) -> None:
        self._channel = grpc.insecure_channel(upstream)
        self._server = grpc.server(ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers([self])
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._lock = threading.Lock()
        self._holds: list[_Hold] = []
        self._stopping = threading.Event()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hold(self, method: str, *, forward_after_s: float | None = None, answer_after_s: float = 0.0) -> threading.Event:
        """The next call of ``method`` (e.g. "JoinGroup") is forwarded only after ``forward_after_s``
        (never if None) and its answer passed back ``answer_after_s`` later. Returns an event set
        when that call arrives."""
        hold = _Hold(method, forward_after_s, answer_after_s)
        with self._lock:
            self._holds.append(hold)
        return hold.arrived

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = details.method  # type: ignore[attr-defined]

        def forward(request: bytes, context: grpc.ServicerContext) -> Any:
            hold = self._take(method.rsplit("/", 1)[-1])
            if hold is not None:
                done = threading.Event()
                context.add_callback(done.set)  # the caller gave up (its deadline) or went away
                hold.arrived.set()
                if hold.forward_after_s is None:
                    while not done.wait(0.05) and not self._stopping.is_set():
                        pass
                    context.abort(grpc.StatusCode.UNAVAILABLE, "black-holed by the test proxy")
                if done.wait(hold.forward_after_s) or self._stopping.is_set():
                    context.abort(grpc.StatusCode.UNAVAILABLE, "caller left while held")
            remaining = context.time_remaining()
            try:
                answer = self._channel.unary_unary(method)(request, timeout=remaining)
            except grpc.RpcError as failure:
                context.abort(failure.code(), failure.details() or "")
            if hold is not None and hold.answer_after_s:
                threading.Event().wait(hold.answer_after_s)  # the answer, late on its way back
            return answer

        return grpc.unary_unary_rpc_method_handler(forward)

    def _take(self, name: str) -> _Hold | None:
        with self._lock:
            for hold in self._holds:
                if hold.method == name:
                    self._holds.remove(hold)
                    return hold
        return None

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.stop(grace=None)
        self._channel.close()
