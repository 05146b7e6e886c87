"""The Session stream (issue 35): one long-lived bidi stream per worker process and coordinator.

Each ``SessionRequest`` carries one request of any member (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ReportLoad, GroupHeartbeat) and is answered by **the same servicer method as its unary
twin** (``coordinator.rpc.service``: same model step, same validation, same answers), under its tag;
news goes out under tag 0 (``coordinator.rpc.session_registry``). Answers go out as they are ready,
so out of tag order; one member's requests reach the model in the order sent (a request waits only
behind a large one of its member's still being parsed off the loop).

What the unary path does per call, the stream does once or per message:

* **at open**: the principal from the token metadata or the mTLS peer (the guard's interceptor and
  ``Guard.before_reading``, before any message is read) and its quota of streams;
* **per message, before decoding** (one of 256 KiB and more, or over ``session_max_message_bytes``):
  its tag, body and group id from its first bytes (``session_envelope.peek``): an oversized one is
  answered INVALID_REQUEST under its tag, one for a group the principal may not act on
  GROUP_AUTHORIZATION_FAILED, neither decoded;
* **per message**: the ACLs for its group (the guard's decision cached per stream and policy), the
  owner of each member it names (never cached), its twin's size bound, the stream's members and
  requests in flight. A refusal is that message's answer; the stream goes on.

A stream ends with a status for what breaks the stream itself: an undecodable message, tag 0 or a
tag in flight (INVALID_ARGUMENT), a reader too slow for its answers (RESOURCE_EXHAUSTED: more than
``session_max_buffered_bytes`` wait for it), idleness or the coordinator stopping (UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from groupcoord.coordinator.auth.guard import CURRENT_PRINCIPAL, Guard
from groupcoord.coordinator.model.effects import error, error_response
from groupcoord.coordinator.rpc.parsing import PARSE_OFF_LOOP_FROM
from groupcoord.coordinator.rpc.service import CoordinatorServicer, peer_host
from groupcoord.coordinator.rpc.session_checks import SEND_UNARY, MessageChecks, member_key
from groupcoord.coordinator.rpc.session_envelope import (
    BATCH_METADATA,
    BODIES,
    SESSION_METHOD,
    Body,
    batch_refusal,
    frame,
    news_frame,
    peek,
)
from groupcoord.coordinator.rpc.session_members import CarriedMembers
from groupcoord.coordinator.rpc.session_outbox import SessionOutbox
from groupcoord.coordinator.rpc.session_registry import MemberKey, SessionRegistry
from groupcoord.coordinator.rpc.session_twins import Aborted, TwinContext, aborted_answer, step_on_loop
from groupcoord.coordinator.runtime.router import ShardRouter
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["SessionStream", "session_service"]

log = logging.getLogger("groupcoord.session")
BY_NAME = {body.name: body for body in BODIES.values()}
_STEPS_AT_START = frozenset({"join_group", "heartbeat", "leave_group"})  # twins with no off-loop check first


class SessionStream:
    """One open stream: reads, checks and dispatches its messages; queues and writes its answers."""

    def __init__(self, router: ShardRouter, servicer: CoordinatorServicer, guard: Guard | None,
                 registry: SessionRegistry, context: grpc.aio.ServicerContext, principal: str) -> None:
        self.router = router
        self.config = config = router.config
        self.principal = principal
        self.in_flight = 0
        self.last_active = router.clock.now()
        self._servicer = servicer
        self._checks = MessageChecks(config, guard, principal)
        self._registry = registry
        self._figures = registry.figures
        self._context = context
        self._twin = TwinContext(context.peer() or "")
        self._host = peer_host(self._twin.peer())
        self._closed = False  # answers of requests held in the model past the stream's end go nowhere
        self._tags: set[int] = set()
        self._members = CarriedMembers(registry, self, config.session_max_members)
        self._behind: dict[str, asyncio.Future[None]] = {}  # group id -> its large request not yet stepped
        self._queued: dict[asyncio.Future[None], list[tuple[int, Body, Any]]] = {}  # requests behind each
        metadata = context.invocation_metadata() or ()
        self._outbox = SessionOutbox(config.session_max_buffered_bytes, self._figures, context.write,
                                     batches=any(key == BATCH_METADATA for key, _ in metadata))
        self._done = asyncio.Event()
        self._reading = True
        self._status: tuple[grpc.StatusCode, str] | None = None
        self._flush = False
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ life

    async def run(self) -> None:
        refusal = self._registry.open(self)
        if refusal is not None:
            await self._context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        principal = self.principal
        CURRENT_PRINCIPAL.set(principal)  # the twins' quotas and owners (the tasks below copy it)
        # headers now, alone: a status can then always follow, even while an answer's write waits for a
        # reader that does not read (sent with that answer, they would hold the status back with it)
        await self._context.send_initial_metadata(((BATCH_METADATA, "1"),))  # we read batches
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._outbox.run(self._maybe_done))
        reader = loop.create_task(self._read_loop())
        try:
            await self._done.wait()
            reader.cancel()
            if self._flush:  # news said goodbye: give the writer a moment to deliver it
                async with asyncio.timeout(1.0):
                    while self._outbox and not writer.done():
                        self._outbox.wake.set()
                        await asyncio.sleep(0.01)
        except TimeoutError:
            pass
        finally:
            self._closed = True
            for task in (reader, writer, *self._tasks):
                task.cancel()
            self._registry.close(self, iter(self._members))
            self._outbox.drop()
        if self._status is not None:
            log.info("session stream of %s ended: %s", principal or "-", self._status[1],
                     extra={"event": "session_ended", "principal": principal, "reason": self._status[1]})
            await self._context.abort(*self._status)

    def finish(self, code: grpc.StatusCode, message: str, *, flush: bool = False, reason: str = "protocol") -> None:
        """End the stream with ``code`` (the first reason given wins; ``reason`` labels the metric)."""
        if self._status is None:
            self._status = (code, message)
            self._flush = flush
            self._registry.metrics.ended.labels(reason).inc()
        self._done.set()

    def _maybe_done(self) -> None:
        if not self._reading and self.in_flight == 0 and not self._outbox:
            self._done.set()

    async def _read_loop(self) -> None:
        context, clock = self._context, self.router.clock
        try:
            while self._status is None:
                data = await context.read()
                if not isinstance(data, bytes):  # grpc.aio.EOF: the client is done sending
                    break
                self.last_active = clock.now()
                self._receive(data)
                del data
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as failure:  # noqa: BLE001  # the transport broke: the stream is over
            self.finish(grpc.StatusCode.CANCELLED, f"reading failed: {failure}")
            return
        self._reading = False
        self._maybe_done()

    # ------------------------------------------------------------------ out

    def _send(self, data: bytes) -> None:
        """Queue an answer or news; past ``session_max_buffered_bytes`` behind the one being written, the
        client is not reading: the stream is cut off and everything queued dropped."""
        if self._status is not None or self._outbox.put(data):
            return
        waiting, limit = self._outbox.waiting_with(data), self._outbox.limit
        log.warning("session stream of %s cut off: %d bytes wait for a client that does not read",
                    self.principal or "-", waiting)
        self.finish(grpc.StatusCode.RESOURCE_EXHAUSTED, (
            f"the client does not read its answers: {waiting:,} bytes would wait for it, at most {limit:,} "
            f"(session_max_buffered_bytes); read faster or ask less at once"), reason="slow_reader")
        self._outbox.drop()

    def push(self, news: pb.SessionNews) -> None:
        self._send(news_frame(news))

    def push_frame(self, data: bytes) -> None:
        self._send(data)

    def forget_member(self, key: MemberKey) -> None:
        self._members.forget(key)

    def _answer(self, tag: int, body: Body, response: Message) -> None:
        self._send(frame(tag, body.key, response.SerializeToString()))

    def _refuse(self, tag: int, body: Body, failure: pb.Error) -> None:
        if failure is SEND_UNARY:  # an empty answer: the client sends it as a unary call
            self._send(pb.SessionResponse(tag=tag).SerializeToString())
            return
        self._answer(tag, body, error_response(body.response, failure))

    # ------------------------------------------------------------------ in

    def _receive(self, data: bytes) -> None:
        size = len(data)
        if size >= PARSE_OFF_LOOP_FROM or size > self.config.session_max_message_bytes:
            self._receive_large(data)
            return
        try:
            envelope = pb.SessionRequest.FromString(data)
        except DecodeError as failure:
            self.finish(grpc.StatusCode.INVALID_ARGUMENT, f"a message is not a valid SessionRequest: {failure}")
            return
        if not envelope.batch:
            self._take(envelope, size)
            return
        refused = batch_refusal(envelope)
        if refused is not None:
            self.finish(grpc.StatusCode.INVALID_ARGUMENT, refused)
            return
        sized = size > self._checks.within_every_bound  # else no request of it can be over its bound
        for inner in envelope.batch:  # each as if sent alone, in order
            if self._status is not None:
                return
            self._take(inner, inner.ByteSize() if sized else size)

    def _take(self, envelope: pb.SessionRequest, size: int) -> None:
        """``size``: the request's bytes, or more (its batch's) when that is within every bound."""
        tag, kind = envelope.tag, envelope.WhichOneof("body")
        if not self._tag_usable(tag):
            return
        if kind is None:  # a body this coordinator does not know (a newer client): an empty answer
            self._send(pb.SessionResponse(tag=tag).SerializeToString())
            return
        body = BY_NAME[kind]
        request = getattr(envelope, kind)
        key = member_key(request)  # (each field read makes a new str: read once)
        refusal = self._checks.refusal(body, request, size, self.in_flight, self._members.keys, key)
        if refusal is not None:
            self._refuse(tag, body, refusal)
            return
        self._dispatch(tag, body, request, key=key)

    def _tag_usable(self, tag: int) -> bool:
        if tag == 0:
            self.finish(grpc.StatusCode.INVALID_ARGUMENT, "a request's tag must not be 0 (0 is the coordinator's news)")
        elif tag in self._tags:
            self.finish(grpc.StatusCode.INVALID_ARGUMENT, f"tag {tag} is already in flight on this stream")
        else:
            return True
        return False

    def _receive_large(self, data: bytes) -> None:
        """A message of 256 KiB or more: refused from its first bytes when it must be, else parsed off the loop."""
        size = len(data)
        first = peek(data, self.config.max_id_length)
        if first is None:
            self.finish(grpc.StatusCode.INVALID_ARGUMENT, f"a message of {size:,} bytes does not start with its tag "
                        f"(a SessionRequest of 256 KiB or more must, as every protobuf encoder writes it: never a batch)")
            return
        tag, body = first.tag, first.body
        if not self._tag_usable(tag):
            return
        if body is None:
            self._send(pb.SessionResponse(tag=tag).SerializeToString())
            return
        too_large = self._checks.too_large(body, size)
        if too_large is not None:
            self._refuse(tag, body, too_large)
            return
        if first.group_id is not None:
            denied = self._checks.group_denied(body, first.group_id, first.id_bytes)
            if denied is not None:
                self._refuse(tag, body, denied)
                return
        if not self.router.large_requests.admit(size):
            self._refuse(tag, body, error(pb.COORDINATOR_NOT_AVAILABLE, (
                f"too many large requests at once (max_request_bytes_in_flight "
                f"{self.config.max_request_bytes_in_flight}); retry shortly")))
            return
        self._tags.add(tag)
        self.in_flight += 1
        loop = asyncio.get_running_loop()
        group_id = first.group_id or ""
        behind = self._behind.get(group_id)
        stepped = self._behind[group_id] = loop.create_future()  # its group's later requests wait for its step
        task = loop.create_task(self._parse_large(tag, body, data, behind, (group_id, stepped)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _parse_large(self, tag: int, body: Body, data: bytes, behind: asyncio.Future[None] | None,
                           stepped: tuple[str, asyncio.Future[None]]) -> None:
        size = len(data)
        handed = False  # to a twin that checks it off the loop first: its task says when it stepped
        try:
            try:
                envelope = await self.router.checkers.run(pb.SessionRequest.FromString, data)
            except DecodeError as failure:
                self.finish(grpc.StatusCode.INVALID_ARGUMENT, f"a message is not a valid SessionRequest: {failure}")
                return
            finally:
                self.router.large_requests.release(size)
                del data
            if behind is not None:
                await asyncio.shield(behind)
            self._tags.discard(tag)
            self.in_flight -= 1
            request = getattr(envelope, body.name)
            refusal = self._checks.refusal(body, request, size, self.in_flight, self._members.keys)
            if refusal is not None:
                self._refuse(tag, body, refusal)
                self._maybe_done()
                return
            self._dispatch(tag, body, request, waited=True,
                           stepped=None if body.name in _STEPS_AT_START else stepped)
            handed = body.name not in _STEPS_AT_START
        finally:
            if not handed:
                self._stepped(*stepped)  # after its twin's task is created (that steps first), or refused

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, tag: int, body: Body, request: Any, *, waited: bool = False,
                  stepped: tuple[str, asyncio.Future[None]] | None = None, key: MemberKey | None = None) -> None:
        """Carry the request's member and count it in flight, then step it (``_step``), or queue it behind a large
        request of its group still on its way (``waited``: a large one, its turn come; ``stepped``: its group
        waits for its answer)."""
        key = key or member_key(request)
        if key[1] and body.name != "leave_group":  # a leave carries nobody
            self._members.carry(key)
        self._tags.add(tag)
        self.in_flight += 1
        behind = None if waited else self._behind.get(key[0])
        if behind is not None:  # stepped in order once the large one has (``_stepped``), with no task each
            self._queued.setdefault(behind, []).append((tag, body, request))
            return
        self._step(tag, body, request, key[0], quick=not waited, stepped=stepped)

    def _step(self, tag: int, body: Body, request: Any, group_id: str, *, quick: bool = True,
              stepped: tuple[str, asyncio.Future[None]] | None = None) -> None:
        """Hand the request to its twin's step: at once when it can be (a quick heartbeat; any request whose twin
        checks nothing off the loop, ``step_on_loop``), else its twin in a task of its own."""
        if quick and body.name == "heartbeat":
            answer = self.router.for_group(group_id).quick_heartbeat(request)  # as the unary twin
            if answer is not None:
                self._answered(tag, body, request, answer)
                return
        if stepped is None and step_on_loop(
                self._servicer, body, request, self._host, partial(self._answered, tag, body, request)):
            return
        task = asyncio.get_running_loop().create_task(self._handle(tag, body, request, stepped))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, tag: int, body: Body, request: Any, stepped: tuple[str, asyncio.Future[None]] | None) -> None:
        try:
            twin = getattr(self._servicer, body.method_name)
            try:
                response = await twin(request, self._twin)
            except Aborted as aborted:
                response = aborted_answer(body, aborted.code, aborted.details)
        finally:
            if stepped is not None:  # a large one whose twin checks it off the loop first: once answered
                self._stepped(*stepped)
        self._answered(tag, body, request, response)

    def _stepped(self, group_id: str, stepped: asyncio.Future[None]) -> None:
        """A large request has stepped: the next large one of its group may, and the requests queued behind it
        step now, in the order read (a task each, awaiting it, was a tenth of the coordinator's CPU when a leader's
        assignment of 10,000 members came ahead of its followers' SyncGroups on their stream)."""
        if not stepped.done():
            stepped.set_result(None)
        if self._behind.get(group_id) is stepped:
            del self._behind[group_id]
        for tag, body, request in self._queued.pop(stepped, ()):
            if self._closed or self._status is not None:
                return
            self._step(tag, body, request, group_id)

    def _answered(self, tag: int, body: Body, request: Any, response: Any) -> None:
        if self._closed:
            return
        self._tags.discard(tag)
        self.in_flight -= 1
        self.last_active = self.router.clock.now()  # just answered: not idle
        self._answer(tag, body, response)
        self._members.note(body, request, response)  # after the answer: news it catches up on comes second
        self._maybe_done()


def session_service(router: ShardRouter, servicer: CoordinatorServicer, guard: Guard | None,
                    registry: SessionRegistry) -> grpc.GenericRpcHandler:
    """The generic handler of ``GroupCoordinator/Session`` (bytes in and out: envelopes are read and written
    by ``SessionStream`` itself)."""

    async def session(_requests: Any, context: grpc.aio.ServicerContext) -> None:
        principal = ""
        if guard is not None and guard.policy.enabled:
            principal, denied = guard.before_reading(SESSION_METHOD, context)  # metadata / mTLS only: nothing read
            if denied is not None:
                await guard.refuse(context, denied)
        await SessionStream(router, servicer, guard, registry, context, principal).run()

    handler = grpc.stream_stream_rpc_method_handler(session, request_deserializer=None, response_serializer=None)
    return grpc.method_handlers_generic_handler("groupcoord.v1.GroupCoordinator", {"Session": handler})
