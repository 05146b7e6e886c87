"""``worker.stream`` for ``grpc.aio``: one Session stream per coordinator address, credentials and event
loop, shared by every ``AsyncWorkerClient`` on that loop.

The decisions are ``worker.stream_tags``' (tags, news, resync, what an ended stream means), as in the
threaded stream; here requests go out through an ``asyncio.Queue`` the call reads, and one task on the
loop reads the answers. Everything runs on the loop, so no lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.call_outcomes import status_of
from groupcoord.worker.effects import WorkerClosedError
from groupcoord.worker.stream_life import StreamLife, session_method
from groupcoord.worker.stream_tags import (
    BATCH_METADATA,
    Hearer,
    Hearers,
    Nudge,
    NudgeKind,
    Outflow,
    Registry,
    Remembered,
    StreamBroken,
    StreamUnsupported,
    TagBook,
    answer_of,
    refused_in_band,
    session_request,
    unbatched,
)

__all__ = ["AioSessionStream", "AioStreamLink"]

log = logging.getLogger("groupcoord.worker")

_Outbox = asyncio.Queue[pb.SessionRequest | None]


class AioSessionStream:
    """One Session stream to ``address`` on the running loop, over its own channel."""

    def __init__(self, key: tuple[Any, ...], address: str, open_channel: Callable[[str], grpc.aio.Channel],
                 metadata: tuple[tuple[str, str], ...] = (), *, reconnect_max_s: float = 1.0,
                 remembered: Remembered | None = None, monotonic: Callable[[], float] = time.monotonic,
                 probe_s: float = 5.0) -> None:
        self.key = key
        self.address = address
        self.hearers = Hearers()
        self.life = StreamLife(address, key[1:], remembered if remembered is not None else Remembered(),
                               reconnect_max_s, monotonic)
        self._open_channel = open_channel
        self._metadata = metadata
        self._book: TagBook[asyncio.Future[Message]] = TagBook()
        self._channel: grpc.aio.Channel | None = None
        self._outbox: _Outbox | None = None
        self._reader: asyncio.Task[None] | None = None
        self._probing = asyncio.Lock()
        self._probe_s = probe_s

    @property
    def unary(self) -> bool:
        return self.life.unary

    @property
    def opened(self) -> int:
        return self.life.opened

    async def send(self, body: str, request: Message, hearer: Hearer) -> tuple[int, asyncio.Future[Message]]:
        """As ``SessionStream.send``, on the loop (one probe at a time: the others wait for its verdict)."""
        self.life.admit(self._outbox is not None)
        if not self.life.probed:
            async with self._probing:
                self.life.admit(self._outbox is not None)  # as the probe before this one left it
                if not self.life.probed:
                    self.life.probed_as(await self._probe())
        self.life.admit(self._outbox is not None)  # closed meanwhile?
        if self._outbox is None:
            self._open()
        assert self._outbox is not None
        answer: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        tag = self._book.open(answer)
        self.hearers.sent(tag, request, hearer)
        self._outbox.put_nowait(session_request(tag, body, request))
        return tag, answer

    def forget(self, tag: int) -> None:
        self._book.forget(tag)
        self.hearers.unanswered(tag)

    async def close(self) -> None:
        self.life.closed = True
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            outbox.put_nowait(None)
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        self.hearers.unanswered()
        _fail(self._book.fail_all(), StreamBroken("the stream is closed"))
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def _session(self) -> Any:
        if self._channel is None:
            self._channel = self._open_channel(self.address)
        return session_method(self._channel)

    async def _probe(self) -> str:
        """As ``SessionStream._probe``: the status of a call that sends nothing (grpc.aio reports a stream
        whose first write races UNIMPLEMENTED as INTERNAL, so the stream's own end cannot tell)."""
        call = self._session()(metadata=self._metadata or None, timeout=self._probe_s)
        try:
            await call.done_writing()
            async for _ in call:
                pass
        except grpc.RpcError as error:
            name: str = status_of(error).name
            return name
        return "OK"

    def _open(self) -> None:
        outbox: _Outbox = asyncio.Queue()
        self.life.opening()
        call = self._session()(_drain(outbox, self.life), metadata=(*self._metadata, (BATCH_METADATA, "1")))
        self._outbox = outbox
        self._reader = asyncio.get_running_loop().create_task(self._read(call, outbox),
                                                              name=f"groupcoord-stream-{self.address}")

    async def _read(self, call: Any, outbox: _Outbox) -> None:
        ended_by: grpc.RpcError | None = None
        try:
            headers = await call.initial_metadata()
            self.life.batches = any(key == BATCH_METADATA for key, _ in headers or ())
            async for response in call:
                for one in unbatched(response):
                    self._take(one)
        except grpc.RpcError as error:
            ended_by = error
        except asyncio.CancelledError:
            call.cancel()
            raise
        self._ended(outbox, ended_by)

    def _take(self, response: pb.SessionResponse) -> None:
        if response.tag == 0:
            if response.HasField("news"):
                self.hearers.tell(response.news)
            return
        if self.life.first_answer():
            self.life.resynced(self.hearers.resync())
        waiter = self._book.answered(response.tag)
        answer = answer_of(response)
        self.hearers.answered(response.tag, answer)
        if waiter is not None and not waiter.done():
            if answer is None:  # the coordinator's "send it unary" (a body it does not know, a full stream)
                waiter.set_exception(StreamUnsupported(self.address))
            else:
                waiter.set_result(answer)

    def _ended(self, outbox: _Outbox, ended_by: grpc.RpcError | None) -> None:
        outbox.put_nowait(None)
        if self._outbox is outbox:
            self._outbox = None
        waiting = self._book.fail_all()
        self.hearers.unanswered()
        _fail(waiting, self.life.ended(ended_by, len(waiting)))


async def _drain(outbox: _Outbox, life: StreamLife) -> AsyncIterator[pb.SessionRequest]:
    """The requests in order, batched as ``worker.stream``'s ``_drain`` does (``Outflow``)."""
    flow = Outflow()
    while not flow.ended:
        message = flow.next(await outbox.get() if flow.waits else None, outbox, life.batches)
        if message is not None:
            yield message


def _fail(waiting: list[asyncio.Future[Message]], error: BaseException) -> None:
    for waiter in waiting:
        if not waiter.done():
            waiter.set_exception(error)


_registry: Registry[AioSessionStream] = Registry()  # keys hold their loop: one loop's streams are its own
_remembered = Remembered()


class AioStreamLink:
    """``worker.stream_link.StreamLink`` for one ``AsyncTransport``: which stream of its loop it uses now."""

    def __init__(self, open_channel: Callable[[str], grpc.aio.Channel], credentials: Hashable,
                 metadata: tuple[tuple[str, str], ...], *, reconnect_max_s: float, enabled: bool = True) -> None:
        self._open_channel = open_channel
        self._credentials = credentials
        self._metadata = metadata
        self._reconnect_max_s = reconnect_max_s
        self.enabled = enabled
        self._stream: AioSessionStream | None = None
        self.on_nudge: Callable[[Nudge], None] | None = None
        self.moved_to: str | None = None

    def via(self, address: str) -> str:
        stream = self._stream
        usable = stream is not None and stream.address == address and not stream.unary and stream.opened > 0
        return "stream" if usable else "unary"

    async def send(self, address: str, body: str, request: Message) -> tuple[int, asyncio.Future[Message]] | None:
        """Put ``request`` on ``address``'s stream, or None: send it unary."""
        stream = await self._stream_to(address)
        if stream is None:
            return None
        try:
            return await stream.send(body, request, self._hear)
        except (StreamUnsupported, StreamBroken):
            return None

    async def wait(self, sent: tuple[int, asyncio.Future[Message]], timeout: float) -> Any:
        """The answer, ``TimeoutError`` at the deadline (the tag forgotten), or the stream's verdict.
        Cancelling the waiting task (the client closing) cancels the wait."""
        tag, answer = sent
        try:
            response = await asyncio.wait_for(asyncio.shield(answer), max(0.0, timeout))
        except TimeoutError:
            if self._stream is not None:
                self._stream.forget(tag)
            raise
        except asyncio.CancelledError:
            if self._stream is not None:
                self._stream.forget(tag)
            if answer.cancelled():
                raise WorkerClosedError("closed during a request") from None
            raise
        refused = refused_in_band(response)
        if refused is not None:
            raise refused
        return response

    def take_move(self) -> str | None:
        hint, self.moved_to = self.moved_to, None
        return hint

    async def release(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.hearers.drop(self._hear)
            last = _registry.release(stream.key)
            if last is not None:
                await last.close()

    async def _stream_to(self, address: str) -> AioSessionStream | None:
        if not self.enabled:
            return None
        if self._stream is not None and self._stream.address != address:
            await self.release()
        if self._stream is None:
            key = (asyncio.get_running_loop(), address, self._credentials)
            self._stream = _registry.acquire(key, lambda: AioSessionStream(
                key, address, self._open_channel, self._metadata, reconnect_max_s=self._reconnect_max_s,
                remembered=_remembered))
        return None if self._stream.unary else self._stream

    def _hear(self, nudge: Nudge) -> None:
        if nudge.kind is NudgeKind.MOVED:
            self.moved_to = nudge.hint
        if self.on_nudge is not None:
            self.on_nudge(nudge)
