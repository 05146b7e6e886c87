"""The threaded Session stream: one per coordinator address and credentials in a worker process, shared by
every ``WorkerClient`` it holds.

Requests go out through grpc's request iterator (a queue), one reader thread takes the answers and the
news off the stream and hands each to whoever waits (``worker.stream_tags`` decides: tags, news, resync).
A coordinator that answers UNIMPLEMENTED has no stream: its address is remembered and every transport
sends unary calls there. A stream that breaks fails its calls in flight (the member's rules take them as
a transport failure), is opened again on a later call after a backoff (unary calls meanwhile), and on
its first answer every member on it is told to heartbeat now: a resync, not a rejoin.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, InvalidStateError
from typing import Any

import grpc
from google.protobuf.message import Message

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.call_outcomes import status_of
from groupcoord.worker.stream_life import StreamLife, session_method
from groupcoord.worker.stream_tags import (
    BATCH_METADATA,
    Hearer,
    Hearers,
    Outflow,
    Registry,
    Remembered,
    StreamBroken,
    StreamUnsupported,
    TagBook,
    answer_of,
    session_request,
    unbatched,
)

__all__ = ["SessionStream", "StreamKey", "shared_streams"]

log = logging.getLogger("groupcoord.worker")

StreamKey = tuple[str, Hashable]
"""(address, credentials): members with the same key share one stream."""

_END = None  # the request iterator's end


class SessionStream:
    """One Session stream to ``address`` over its own channel; any thread may send, one thread reads."""

    def __init__(self, key: StreamKey, open_channel: Callable[[str], grpc.Channel],
                 metadata: tuple[tuple[str, str], ...] = (), *, reconnect_max_s: float = 1.0,
                 remembered: Remembered | None = None, monotonic: Callable[[], float] = time.monotonic,
                 probe_s: float = 5.0) -> None:
        self.key = key
        self.address = key[0]
        self.hearers = Hearers()
        self.life = StreamLife(self.address, key, remembered if remembered is not None else Remembered(),
                               reconnect_max_s, monotonic)
        self._open_channel = open_channel
        self._metadata = metadata
        self._probe_s = probe_s
        self._lock = threading.Lock()
        self._book: TagBook[Future[Message]] = TagBook()
        self._channel: grpc.Channel | None = None
        self._outbox: queue.SimpleQueue[pb.SessionRequest | None] | None = None

    @property
    def unary(self) -> bool:
        """True when the coordinator has no Session stream (remembered for the address)."""
        return self.life.unary

    @property
    def opened(self) -> int:
        """Streams opened so far (the first, then each reconnect)."""
        return self.life.opened

    def send(self, method: str, request: Message, hearer: Hearer) -> tuple[int, Future[Message]]:
        """Put ``request`` on the stream; the future gets its answer, or ``StreamBroken`` /
        ``StreamUnsupported``. Raises either at once when the stream cannot take it now (unary then)."""
        with self._lock:
            self.life.admit(self._outbox is not None)
            if self._outbox is None:
                if not self.life.probed:
                    self.life.probed_as(self._probe())
                self._open()
            future: Future[Message] = Future()
            tag = self._book.open(future)
            self.hearers.sent(tag, request, hearer)
            assert self._outbox is not None
            self._outbox.put(session_request(tag, method, request))
        return tag, future

    def forget(self, tag: int) -> None:
        """The caller stopped waiting for ``tag`` (its deadline, a close)."""
        with self._lock:
            self._book.forget(tag)
            self.hearers.unanswered(tag)

    def leave(self, hearer: Hearer) -> None:
        with self._lock:
            self.hearers.drop(hearer)

    def close(self) -> None:
        with self._lock:
            self.life.closed = True
            outbox, self._outbox = self._outbox, None
            waiting = self._book.fail_all()
            self.hearers.unanswered()
            channel, self._channel = self._channel, None
        if outbox is not None:
            outbox.put(_END)
        _fail(waiting, StreamBroken("the stream is closed"))
        if channel is not None:
            channel.close()

    # ------------------------------------------------------------------ inside

    def _session(self) -> Any:
        if self._channel is None:
            self._channel = self._open_channel(self.address)
        return session_method(self._channel)

    def _probe(self) -> str:
        """Ask (under the lock) whether the coordinator serves Session: the status of a call that sends
        nothing (``StreamLife.probed_as`` judges it)."""
        try:
            for _ in self._session()(iter(()), metadata=self._metadata or None, timeout=self._probe_s):
                pass
        except grpc.RpcError as error:
            name: str = status_of(error).name
            return name
        return "OK"

    def _open(self) -> None:
        """A new stream (under the lock); the reader thread owns its responses."""
        outbox: queue.SimpleQueue[pb.SessionRequest | None] = queue.SimpleQueue()
        self.life.opening()
        call = self._session()(_drain(outbox, self.life), metadata=(*self._metadata, (BATCH_METADATA, "1")))
        self._outbox = outbox
        reader = threading.Thread(target=self._read, args=(call, outbox), daemon=True,
                                  name=f"groupcoord-stream-{self.address}")
        reader.start()

    def _read(self, call: Any, outbox: queue.SimpleQueue[pb.SessionRequest | None]) -> None:
        ended_by: grpc.RpcError | None = None
        try:
            self.life.batches = any(key == BATCH_METADATA for key, _ in call.initial_metadata() or ())
            for response in call:
                for one in unbatched(response):
                    self._take(one)
        except grpc.RpcError as error:
            ended_by = error
        self._ended(outbox, ended_by)

    def _take(self, response: pb.SessionResponse) -> None:
        if response.tag == 0:
            if response.HasField("news"):
                with self._lock:
                    told = self.hearers.tell(response.news)
                if not told:
                    log.debug("news for a member this process does not hold: %s", response.news)
            return
        with self._lock:
            resync = self.life.first_answer()
            waiter = self._book.answered(response.tag)
            answer = answer_of(response)
            self.hearers.answered(response.tag, answer)
        if resync:
            with self._lock:
                self.life.resynced(self.hearers.resync())
        if waiter is not None:
            if answer is None:  # the coordinator's "send it unary" (a body it does not know, a full stream)
                _settle(waiter, error=StreamUnsupported(self.address))
            else:
                _settle(waiter, answer=answer)

    def _ended(self, outbox: queue.SimpleQueue[pb.SessionRequest | None], ended_by: grpc.RpcError | None) -> None:
        outbox.put(_END)
        with self._lock:
            if self._outbox is outbox:
                self._outbox = None
            waiting = self._book.fail_all()
            self.hearers.unanswered()
            failure = self.life.ended(ended_by, len(waiting))
        _fail(waiting, failure)


def _drain(outbox: queue.SimpleQueue[pb.SessionRequest | None], life: StreamLife) -> Iterator[pb.SessionRequest]:
    """The requests in order; what waits together goes as one batch to a coordinator that reads them (``Outflow``)."""
    flow = Outflow()
    while not flow.ended:
        message = flow.next(outbox.get() if flow.waits else None, outbox, life.batches)
        if message is not None:
            yield message


def _settle(waiter: Future[Message], *, answer: Message | None = None, error: BaseException | None = None) -> None:
    try:
        if error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(answer)  # type: ignore[arg-type]
    except InvalidStateError:  # the caller cancelled it (closed) meanwhile
        pass


def _fail(waiting: list[Future[Message]], error: BaseException) -> None:
    for waiter in waiting:
        _settle(waiter, error=error)


class _Shared:
    """The process-wide registry of threaded streams (one lock: transports of any thread acquire)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.remembered = Remembered()
        self.registry: Registry[SessionStream] = Registry()

    def acquire(self, key: StreamKey, make: Callable[[], SessionStream]) -> SessionStream:
        with self.lock:
            return self.registry.acquire(key, make)

    def release(self, key: StreamKey) -> None:
        with self.lock:
            last = self.registry.release(key)
        if last is not None:
            last.close()


shared_streams = _Shared()
"""Every threaded transport of the process acquires its streams here."""
