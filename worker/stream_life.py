"""A Session stream's life across its openings, as both drivers keep it (``worker.stream``'s threads,
``worker.aio_stream``'s loop), without I/O: whether a call may go on it now, what a probe's status and a
stream's end mean (remembered unary, a backoff before the next opening, or a resync once it answers
again). The drivers open the stream, read it and wait their own way, and ask this at each step."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import grpc

from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.call_outcomes import describe_rpc_error, status_of
from groupcoord.worker.stream_tags import (
    REFUSED_AT_OPEN,
    REFUSED_WAIT_S,
    SESSION_METHOD,
    Remembered,
    StreamBroken,
    StreamUnsupported,
    probe_verdict,
    reconnect_wait,
)

__all__ = ["StreamLife", "session_method"]

log = logging.getLogger("groupcoord.worker")


@dataclass
class StreamLife:
    """One stream's state between its openings (one owner at a time: the threaded stream's lock, or the loop).
    ``remembered_as`` is the key the coordinator's "no Session here" is remembered under."""

    address: str
    remembered_as: Hashable
    remembered: Remembered
    reconnect_max_s: float
    now: Callable[[], float]
    opened: int = 0  # streams opened so far (the first, then each reconnect)
    batches: bool = False  # the coordinator of the open stream reads batched requests
    answered: bool = False  # the current stream answered once: the coordinator serves Session
    probed: bool = False  # the coordinator answered a probe: it serves Session
    closed: bool = False
    failures: int = 0
    retry_at: float = 0.0

    @property
    def unary(self) -> bool:
        """True when the coordinator has no Session stream (remembered for the address)."""
        return self.remembered.unary(self.remembered_as, self.now())

    def admit(self, open_now: bool) -> None:
        """Raises why a call cannot go on the stream now (the caller sends it unary): closed, no Session at
        this coordinator, or (no stream open) the backoff before the next opening."""
        if self.closed:
            raise StreamBroken("the stream is closed")
        if self.unary:
            raise StreamUnsupported(self.address)
        if not open_now and self.now() < self.retry_at:
            raise StreamBroken("reconnecting after a backoff")

    def probed_as(self, status: str) -> None:
        """The status (its name) of the probe, a Session call that sent nothing (``probe_verdict``): raises
        ``StreamUnsupported`` (remembered) or ``StreamBroken`` (after a backoff), or notes the stream served."""
        verdict = probe_verdict(status)
        if verdict is False:
            self.remembered.note(self.remembered_as, self.now())
            log.info("coordinator %s has no Session stream (UNIMPLEMENTED): unary calls there", self.address)
            raise StreamUnsupported(self.address)
        if verdict is None:
            self._back_off(refused=status in REFUSED_AT_OPEN)
            raise StreamBroken(f"no Session stream from {self.address} now: {status}")
        self.probed = True

    def opening(self) -> None:
        """A new stream is opened: it has answered nothing, and reads no batches until its headers say so."""
        self.batches = False
        self.answered = False
        self.opened += 1

    def first_answer(self) -> bool:
        """An answer came on the stream: True when it is the first of a stream opened again (its members
        resync: the driver tells them, then ``resynced``). The first stream's first answer is logged here."""
        if self.answered:
            return False
        self.answered = True
        self.failures = 0
        if self.opened == 1:
            log.info("Session stream to %s open: members' calls go on it", self.address)
            return False
        return True

    def resynced(self, told: int) -> None:
        log.info("Session stream to %s open again (stream %d): %d member(s) resync", self.address, self.opened, told)

    def ended(self, error: grpc.RpcError | None, in_flight: int) -> StreamBroken | StreamUnsupported:
        """The stream ended (``error``: how; None: the coordinator ended it): what its calls in flight fail
        with. Before any answer, UNIMPLEMENTED is remembered and a refusal (REFUSED_AT_OPEN) waits
        REFUSED_WAIT_S: both send their calls unary. Otherwise it broke: reopened after a backoff (not once
        closed)."""
        status = grpc.StatusCode.OK if error is None else status_of(error)
        detail = "the coordinator ended the stream" if error is None else describe_rpc_error(error)
        unsupported = status is grpc.StatusCode.UNIMPLEMENTED and not self.answered
        refused = status.name in REFUSED_AT_OPEN and not self.answered  # nothing served: unary for now
        if unsupported:
            self.remembered.note(self.remembered_as, self.now())
        elif not self.closed:
            self._back_off(refused)
        if unsupported or refused:
            log.info("coordinator %s gives no Session stream (%s): unary calls there", self.address, detail)
            return StreamUnsupported(self.address)
        if not self.closed:
            log.warning("Session stream to %s broke: %s (%d call(s) in flight)", self.address, detail, in_flight)
        return StreamBroken(f"Session stream to {self.address} broke: {detail}")

    def _back_off(self, refused: bool) -> None:
        self.failures += 1
        self.retry_at = self.now() + (REFUSED_WAIT_S if refused else reconnect_wait(self.failures,
                                                                                    self.reconnect_max_s))


def session_method(channel: grpc.Channel | grpc.aio.Channel) -> Any:
    """The Session call on ``channel`` (threaded or grpc.aio: the same stub)."""
    return channel.stream_stream(SESSION_METHOD, request_serializer=pb.SessionRequest.SerializeToString,
                                 response_deserializer=pb.SessionResponse.FromString)
