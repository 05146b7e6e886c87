"""One threaded transport's hold on the process's shared Session streams (``worker.stream``).

The transport (``worker.transport.Transport``) asks ``send`` for each member call: it gets the waiting
answer, or None when that call goes unary (the coordinator has no stream, the stream is between two
attempts, or streams are off). The link follows the transport's coordinator: a new address releases the
old stream and acquires that address's one. News for the member comes back through ``on_nudge``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import CancelledError, Future
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord.worker.effects import WorkerClosedError
from groupcoord.worker.stream import SessionStream, StreamKey, shared_streams
from groupcoord.worker.stream_tags import Nudge, NudgeKind, StreamBroken, StreamUnsupported, refused_in_band

__all__ = ["Pending", "StreamLink"]

GiveUp = tuple[float, Callable[[], None]]
"""As ``worker.transport.GiveUp``: (seconds, callback)."""

Pending = tuple[SessionStream, int, "Future[Message]"]
"""A call on a stream: the stream, its tag, the answer to come."""


class StreamLink:
    """Which shared stream a transport's member calls use now (one owner: the worker's thread; ``on_nudge``
    and ``moved_to`` are also written by the stream's reader)."""

    def __init__(self, open_channel: Callable[[str], grpc.Channel], credentials: Hashable,
                 metadata: Callable[[], tuple[tuple[str, str], ...]], *, reconnect_max_s: float,
                 enabled: bool = True) -> None:
        self._open_channel = open_channel
        self._credentials = credentials
        self._metadata = metadata
        self._reconnect_max_s = reconnect_max_s
        self.enabled = enabled
        self._stream: SessionStream | None = None
        self.on_nudge: Callable[[Nudge], None] | None = None
        self.moved_to: str | None = None  # CoordinatorMoved heard: the transport rediscovers first

    def via(self, address: str) -> str:
        """"stream" when calls to ``address`` go on a Session stream now, else "unary"."""
        stream = self._stream
        usable = stream is not None and stream.address == address and not stream.unary and stream.opened > 0
        return "stream" if usable else "unary"

    def send(self, address: str, body: str, request: Message) -> Pending | None:
        """Put ``request`` on ``address``'s stream, or None: send it unary."""
        stream = self._stream_to(address)
        if stream is None:
            return None
        try:
            tag, answer = stream.send(body, request, self._hear)
        except (StreamUnsupported, StreamBroken):
            return None
        return stream, tag, answer

    def wait(self, pending: Pending, timeout: float, give_up: GiveUp | None, aborted: threading.Event,
             track: Callable[[Future[Any] | None], None]) -> Any:
        """The answer of a call on the stream, as ``Transport._wait`` waits for a unary one: ``track`` makes it
        the transport's call in flight (``abort()`` cancels it: ``WorkerClosedError``); after ``give_up``'s
        seconds its callback runs and the wait goes on. ``TimeoutError`` at the deadline, or the stream's
        ``StreamBroken`` / ``StreamUnsupported``; ``NotAuthorizedError`` for an ACL refusal (``refused_in_band``)."""
        answer = pending[2]
        track(answer)
        try:
            if aborted.is_set():
                answer.cancel()
            if give_up is not None and give_up[0] < timeout:
                try:
                    return answer.result(timeout=max(0.0, give_up[0]))  # the tag stays: still waited for
                except TimeoutError:
                    give_up[1]()
                    timeout -= give_up[0]
            answer = answer_in_time(pending, timeout)
        except CancelledError:
            pending[0].forget(pending[1])
            raise WorkerClosedError("closed during a request") from None
        finally:
            track(None)
        refused = refused_in_band(answer)
        if refused is not None:
            raise refused
        return answer

    def ask(self, address: str, body: str, request: Message, timeout: float) -> Any:
        """One call on the stream, for LeaveGroup after a close; ``StreamUnsupported`` when it cannot go there."""
        pending = self.send(address, body, request)
        if pending is None:
            raise StreamUnsupported(address)
        return answer_in_time(pending, timeout)

    def take_move(self) -> str | None:
        """A CoordinatorMoved heard since the last call: its hint ("" unknown), or None."""
        hint, self.moved_to = self.moved_to, None
        return hint

    def release(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.leave(self._hear)
            shared_streams.release(stream.key)

    def _stream_to(self, address: str) -> SessionStream | None:
        if not self.enabled:
            return None
        if self._stream is not None and self._stream.address != address:
            self.release()
        if self._stream is None:
            key: StreamKey = (address, self._credentials)
            self._stream = shared_streams.acquire(key, lambda: self._new_stream(key))
        return None if self._stream.unary else self._stream

    def _new_stream(self, key: StreamKey) -> SessionStream:
        return SessionStream(key, self._open_channel, self._metadata(), reconnect_max_s=self._reconnect_max_s,
                             remembered=shared_streams.remembered)

    def _hear(self, nudge: Nudge) -> None:
        """News for this member (the stream's reader thread): note a move, then tell the driver."""
        if nudge.kind is NudgeKind.MOVED:
            self.moved_to = nudge.hint
        on_nudge = self.on_nudge
        if on_nudge is not None:
            on_nudge(nudge)


def answer_in_time(pending: Pending, timeout: float) -> Any:
    """The answer, or ``TimeoutError`` (the tag forgotten: a late answer is dropped)."""
    stream, tag, answer = pending
    try:
        return answer.result(timeout=max(0.0, timeout))
    except TimeoutError:
        stream.forget(tag)
        raise
