"""A raw Session stream client for tests: requests in, answers by tag and news out, as any client would speak it."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc

from groupcoord.v1 import groupcoord_pb2 as pb

SESSION = "/groupcoord.v1.GroupCoordinator/Session"
_END = object()


class RawSession:
    """One open stream: ``send`` returns the tag; ``answer(tag)`` waits for its answer; ``news`` collects tag 0."""

    def __init__(self, channel: grpc.Channel, metadata: Sequence[tuple[str, str]] = (), *,
                 raw: bool = False) -> None:
        self._outgoing: queue.Queue[Any] = queue.Queue()
        self._tags = itertools.count(1)
        self._answers: dict[int, pb.SessionResponse] = {}
        self._news: list[pb.SessionNews] = []
        self._arrived = threading.Condition()
        self.status: grpc.RpcError | None = None
        self.ended = threading.Event()
        self.messages = 0  # gRPC messages read (a batch is one)
        self.arrived: list[tuple[int, int]] = []  # (message, tag) of each answer, in the order they came
        call = channel.stream_stream(SESSION, request_serializer=None if raw else pb.SessionRequest.SerializeToString,
                                     response_deserializer=pb.SessionResponse.FromString)
        self._call = call(self._requests(), metadata=list(metadata) or None)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[Any]:
        while True:
            item = self._outgoing.get()
            if item is _END:
                return
            yield item

    def _read(self) -> None:
        try:
            for message in self._call:
                with self._arrived:
                    self.messages += 1
                    for response in message.batch or [message]:
                        if response.tag == 0:
                            self._news.append(response.news)
                        else:
                            self._answers[response.tag] = response
                            self.arrived.append((self.messages, response.tag))
                    self._arrived.notify_all()
        except grpc.RpcError as failure:
            self.status = failure
        finally:
            self.ended.set()
            with self._arrived:
                self._arrived.notify_all()

    def send(self, body: str, request: Any, tag: int | None = None) -> int:
        tag = next(self._tags) if tag is None else tag
        self._outgoing.put(pb.SessionRequest(tag=tag, **{body: request}))
        return tag

    def send_batch(self, requests: Sequence[tuple[str, Any]]) -> list[int]:
        """Several requests as one message (``SessionRequest.batch``); their tags."""
        tags = [next(self._tags) for _ in requests]
        self._outgoing.put(pb.SessionRequest(batch=[pb.SessionRequest(tag=tag, **{body: request})
                                                    for tag, (body, request) in zip(tags, requests, strict=True)]))
        return tags

    def headers(self) -> dict[str, str]:
        """The coordinator's initial metadata."""
        return dict(self._call.initial_metadata() or ())

    def send_raw(self, data: bytes) -> None:
        """Only on a stream opened with ``raw=True``."""
        self._outgoing.put(data)

    def answer(self, tag: int, timeout: float = 10.0) -> Any:
        """The body of the answer to ``tag`` (AssertionError if none comes, or the stream ends first)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: tag in self._answers or self.ended.is_set(), timeout):
                raise AssertionError(f"no answer to tag {tag} within {timeout} s")
            if tag not in self._answers:
                raise AssertionError(f"the stream ended before answering tag {tag}: {self.status}")
            response = self._answers.pop(tag)
        kind = response.WhichOneof("body")
        return getattr(response, kind) if kind else None

    def ask(self, body: str, request: Any, timeout: float = 10.0) -> Any:
        return self.answer(self.send(body, request), timeout)

    def news(self, count: int = 1, timeout: float = 10.0) -> list[pb.SessionNews]:
        """Wait until ``count`` news arrived; returns (and clears) them all."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self._news) >= count or self.ended.is_set(), timeout):
                raise AssertionError(f"{len(self._news)} news within {timeout} s, {count} expected")
            told, self._news = self._news, []
        return told

    def has_news(self) -> list[pb.SessionNews]:
        with self._arrived:
            told, self._news = self._news, []
        return told

    def ended_with(self, timeout: float = 10.0) -> grpc.StatusCode:
        """The status the stream ended with."""
        if not self.ended.wait(timeout):
            raise AssertionError(f"the stream did not end within {timeout} s")
        assert self.status is not None, "the stream ended with OK"
        code: grpc.StatusCode = self.status.code()
        return code

    def close(self) -> None:
        self._outgoing.put(_END)

    def cancel(self) -> None:
        self._call.cancel()
        self.ended.wait(5)
