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
from groupcoord.worker.stream_tags import (
    BATCH_METADATA,
    REFUSED_AT_OPEN,
    REFUSED_WAIT_S,
    SESSION_METHOD,
    Hearer,
    Hearers,
    Outflow,
    Registry,
    Remembered,
    StreamBroken,
    StreamUnsupported,
    TagBook,
    answer_of,
    probe_verdict,
    reconnect_wait,
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
        self.opened = 0  # streams opened so far (the first, then each reconnect)
        self._open_channel = open_channel
        self._metadata = metadata
        self._reconnect_max_s = reconnect_max_s
        self._probe_s = probe_s
        self._remembered = remembered if remembered is not None else Remembered()
        self._now = monotonic
        self._lock = threading.Lock()
        self._book: TagBook[Future[Message]] = TagBook()
        self._channel: grpc.Channel | None = None
        self._outbox: queue.SimpleQueue[pb.SessionRequest | None] | None = None
        self._answered = False  # the current stream answered once: the coordinator serves Session
        self._failures = 0
        self._retry_at = 0.0
        self._closed = False
        self._probed = False  # the coordinator answered a probe: it serves Session
        self.batches = False  # the coordinator of the open stream reads batched requests

    @property
    def unary(self) -> bool:
        """True when the coordinator has no Session stream (remembered for the address)."""
        return self._remembered.unary(self.key, self._now())

    def send(self, method: str, request: Message, hearer: Hearer) -> tuple[int, Future[Message]]:
        """Put ``request`` on the stream; the future gets its answer, or ``StreamBroken`` /
        ``StreamUnsupported``. Raises either at once when the stream cannot take it now (unary then)."""
        with self._lock:
            if self._closed:
                raise StreamBroken("the stream is closed")
            if self.unary:
                raise StreamUnsupported(self.address)
            if self._outbox is None:
                if self._now() < self._retry_at:
                    raise StreamBroken("reconnecting after a backoff")
                if not self._probed:
                    self._probe()
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
            self._closed = True
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
        return self._channel.stream_stream(SESSION_METHOD, request_serializer=pb.SessionRequest.SerializeToString,
                                           response_deserializer=pb.SessionResponse.FromString)

    def _probe(self) -> None:
        """Ask once (under the lock) whether the coordinator serves Session: a call that sends nothing
        (``stream_tags.probe_verdict``). Raises ``StreamUnsupported`` (remembered) or ``StreamBroken``."""
        status = "OK"
        try:
            for _ in self._session()(iter(()), metadata=self._metadata or None, timeout=self._probe_s):
                pass
        except grpc.RpcError as error:
            status = (error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN).name
        verdict = probe_verdict(status)
        if verdict is False:
            self._remembered.note(self.key, self._now())
            log.info("coordinator %s has no Session stream (UNIMPLEMENTED): unary calls there", self.address)
            raise StreamUnsupported(self.address)
        if verdict is None:
            self._failures += 1
            self._retry_at = self._now() + (REFUSED_WAIT_S if status in REFUSED_AT_OPEN else
                                            reconnect_wait(self._failures, self._reconnect_max_s))
            raise StreamBroken(f"no Session stream from {self.address} now: {status}")
        self._probed = True

    def _open(self) -> None:
        """A new stream (under the lock); the reader thread owns its responses."""
        outbox: queue.SimpleQueue[pb.SessionRequest | None] = queue.SimpleQueue()
        self.batches = False
        call = self._session()(_drain(outbox, self), metadata=(*self._metadata, (BATCH_METADATA, "1")))
        self._outbox = outbox
        self._answered = False
        self.opened += 1
        reader = threading.Thread(target=self._read, args=(call, outbox), daemon=True,
                                  name=f"groupcoord-stream-{self.address}")
        reader.start()

    def _read(self, call: Any, outbox: queue.SimpleQueue[pb.SessionRequest | None]) -> None:
        status, detail = grpc.StatusCode.OK, "the coordinator ended the stream"
        try:
            self.batches = any(key == BATCH_METADATA for key, _ in call.initial_metadata() or ())
            for response in call:
                for one in unbatched(response):
                    self._take(one)
        except grpc.RpcError as error:
            status = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
            detail = f"{status.name} {error.details() if hasattr(error, 'details') else error}"
        self._ended(outbox, status, detail)

    def _take(self, response: pb.SessionResponse) -> None:
        if response.tag == 0:
            if response.HasField("news"):
                with self._lock:
                    told = self.hearers.tell(response.news)
                if not told:
                    log.debug("news for a member this process does not hold: %s", response.news)
            return
        with self._lock:
            first = not self._answered
            self._answered = True
            if first:
                self._failures = 0
            waiter = self._book.answered(response.tag)
            answer = answer_of(response)
            self.hearers.answered(response.tag, answer)
        if first:
            self._first_answer()
        if waiter is not None:
            if answer is None:  # the coordinator's "send it unary" (a body it does not know, a full stream)
                _settle(waiter, error=StreamUnsupported(self.address))
            else:
                _settle(waiter, answer=answer)

    def _first_answer(self) -> None:
        if self.opened == 1:
            log.info("Session stream to %s open: members' calls go on it", self.address)
            return
        with self._lock:
            told = self.hearers.resync()
        log.info("Session stream to %s open again (stream %d): %d member(s) resync", self.address, self.opened, told)

    def _ended(self, outbox: queue.SimpleQueue[pb.SessionRequest | None], status: grpc.StatusCode,
               detail: str) -> None:
        outbox.put(_END)
        with self._lock:
            if self._outbox is outbox:
                self._outbox = None
            unsupported = status is grpc.StatusCode.UNIMPLEMENTED and not self._answered
            refused = status.name in REFUSED_AT_OPEN and not self._answered  # nothing served: unary for now
            if unsupported:
                self._remembered.note(self.key, self._now())
            elif not self._closed:
                self._failures += 1
                self._retry_at = self._now() + (REFUSED_WAIT_S if refused else
                                                reconnect_wait(self._failures, self._reconnect_max_s))
            waiting = self._book.fail_all()
            self.hearers.unanswered()
            closed = self._closed
        if unsupported or refused:
            log.info("coordinator %s gives no Session stream (%s): unary calls there", self.address, detail)
            _fail(waiting, StreamUnsupported(self.address))
        else:
            if not closed:
                log.warning("Session stream to %s broke: %s (%d call(s) in flight)", self.address, detail,
                            len(waiting))
            _fail(waiting, StreamBroken(f"Session stream to {self.address} broke: {detail}"))


def _drain(outbox: queue.SimpleQueue[pb.SessionRequest | None], stream: SessionStream) -> Iterator[pb.SessionRequest]:
    """The requests in order; what waits together goes as one batch to a coordinator that reads them (``Outflow``)."""
    flow = Outflow()
    while not flow.ended:
        message = flow.next(outbox.get() if flow.waits else None, outbox, stream.batches)
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
