"""The worker's side of the Session stream, without I/O: tags, answers, news and who shares a stream.

One worker process keeps one ``Session`` stream per coordinator address (and credentials), shared by
every member it holds (``worker.stream`` for threads, ``worker.aio_stream`` for asyncio). Each
request goes out in a ``SessionRequest`` with a tag unique on its stream; the answer carries the tag
back and ``TagBook`` finds who waits for it. News (tag 0) names its member: ``Hearers`` finds the
member's transport, and ``nudge_for`` says what the member does about it (join now, heartbeat now,
ask FindCoordinator again). Both drivers take these decisions from here, so they cannot drift.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import tenacity
from google.protobuf.message import Message

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["BATCH_METADATA", "REFUSED_AT_OPEN", "REFUSED_WAIT_S", "RESYNC", "SESSION_METHOD", "STREAMED", "Hearer",
           "Hearers", "Nudge", "NudgeKind", "Outbox", "Outflow", "Registry", "Remembered", "RequestBatch", "StreamBroken",
           "StreamUnsupported", "TagBook", "answer_of", "member_of", "nudge_for", "probe_verdict", "reconnect_wait",
           "refused_in_band", "session_request", "unbatched"]

log = logging.getLogger("groupcoord.worker")

SESSION_METHOD = "/groupcoord.v1.GroupCoordinator/Session"
"""The stream's full method name: called by name, so a coordinator without it answers UNIMPLEMENTED."""

BATCH_METADATA = "groupcoord-session-batch"
"""In our call's metadata: we read batched answers; in the coordinator's initial metadata: it reads batched
requests. One message for many costs gRPC Python one read or write instead of one each (a rebalance's burst)."""
BATCH_MAX = 100
"""Requests in one batch (the coordinator takes up to 1,000): it steps a batch's requests before its next read,
so a small batch keeps its loop fair to other streams while saving nearly all of gRPC's per-message cost."""
BATCH_BYTES = 128 * 1024  # a batch stays well under the size the coordinator parses off its loop (256 KiB)

STREAMED = {"JoinGroup": "join_group", "SyncGroup": "sync_group", "Heartbeat": "heartbeat",
            "LeaveGroup": "leave_group", "ReportLoad": "report_load", "GroupHeartbeat": "group_heartbeat"}
"""The member calls the Session stream carries (RPC name -> its ``SessionRequest`` body); admin and lookup
calls stay unary."""

W = TypeVar("W")
S = TypeVar("S")


class StreamUnsupported(Exception):
    """The coordinator has no Session stream (UNIMPLEMENTED): send this request, and the next ones, unary."""


class StreamBroken(Exception):
    """The stream ended before the answer came (its status in the message): the request's fate is unknown."""


def probe_verdict(status: str) -> bool | None:
    """Whether a coordinator serves Session, from the status (its name) of a Session call that sent nothing
    and closed at once: UNIMPLEMENTED no; any answer of the coordinator's own (OK, a refusal) yes; no answer
    (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED) None: not known yet. The probe exists because a stream
    whose first write races the server's UNIMPLEMENTED is reported INTERNAL by grpc.aio (2 in 40 came back
    UNIMPLEMENTED in a loop here), so the stream's own end cannot tell."""
    if status == "UNIMPLEMENTED":
        return False
    if status in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED") or status in REFUSED_AT_OPEN:
        return None
    return True


REFUSED_AT_OPEN = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED"})
"""Statuses of a coordinator that serves Session but will not open one for us now (a credential, or the
per-principal quota of streams): the calls go unary (whose twin gives the right error, a fatal one for
a credential), and the stream is tried again after ``REFUSED_WAIT_S``."""

REFUSED_WAIT_S = 30.0


def session_request(tag: int, body: str, request: Message) -> pb.SessionRequest:
    """The envelope of ``request`` as ``body`` (a value of ``STREAMED``) under ``tag``."""
    envelope = pb.SessionRequest(tag=tag)
    getattr(envelope, body).CopyFrom(request)
    return envelope


def unbatched(response: pb.SessionResponse) -> Sequence[pb.SessionResponse]:
    """The answers and news ``response`` carries, in order: its batch's, or itself."""
    return response.batch if len(response.batch) else (response,)


class RequestBatch:
    """Requests waiting together on a stream's outbox, sent as one message to a coordinator that reads batches."""

    def __init__(self, first: pb.SessionRequest) -> None:
        self.requests = [first]
        self.size = first.ByteSize()

    def add(self, request: pb.SessionRequest) -> bool:
        """Take ``request`` in, or False when it would make the batch too large (it goes in the next one)."""
        size = request.ByteSize()
        if len(self.requests) >= BATCH_MAX or self.size + size > BATCH_BYTES:
            return False
        self.requests.append(request)
        self.size += size
        return True

    def message(self) -> pb.SessionRequest:
        return self.requests[0] if len(self.requests) == 1 else pb.SessionRequest(batch=self.requests)


class Outbox(Protocol):
    """What ``Outflow`` reads of a stream's outbox (``queue.SimpleQueue`` and ``asyncio.Queue`` alike): only
    what is there now, never waiting."""

    def empty(self) -> bool: ...

    def get_nowait(self) -> pb.SessionRequest | None: ...


class Outflow:
    """The messages that carry a stream's outbox, in order (both drivers' request iterator): the driver
    waits for a request when ``waits`` says so and hands it to ``next``, which adds what else the outbox
    holds now and fits (when the coordinator reads batches). None on the outbox ends the stream."""

    def __init__(self) -> None:
        self._held: pb.SessionRequest | None = None  # taken from the outbox, did not fit: first of the next
        self.ended = False

    @property
    def waits(self) -> bool:
        """The next message's first request is to be waited for (none is held)."""
        return self._held is None

    def next(self, taken: pb.SessionRequest | None, outbox: Outbox, batches: bool) -> pb.SessionRequest | None:
        """The next message (None: the end); ``taken``: what the driver waited for when ``waits`` (else unused)."""
        first, self._held = (taken, None) if self._held is None else (self._held, None)
        if first is None:
            self.ended = True
            return None
        batch = RequestBatch(first)
        while batches and not outbox.empty():
            more = outbox.get_nowait()
            if more is None:
                self.ended = True
                break
            if not batch.add(more):
                self._held = more
                break
        return batch.message()


def refused_in_band(answer: Message) -> errors.NotAuthorizedError | None:
    """A member call the coordinator refused on the stream for its group's ACL (GROUP_AUTHORIZATION_FAILED
    in the answer, the stream going on) fails as its unary twin does (PERMISSION_DENIED): the same
    ``NotAuthorizedError``, whose row stops the worker, whichever way the call went."""
    error = getattr(answer, "error", None)
    if error is not None and error.code == pb.GROUP_AUTHORIZATION_FAILED:
        return errors.NotAuthorizedError(error.message or "not authorized for this group")
    return None


def answer_of(response: pb.SessionResponse) -> Message | None:
    """The answer inside ``response`` (None for news or an empty body)."""
    which = response.WhichOneof("body")
    if which is None or which == "news":
        return None
    answer: Message = getattr(response, which)
    return answer


class TagBook(Generic[W]):
    """Requests in flight on one stream: the next tag, and the waiter of each tag (one owner: its stream's lock
    or loop). Tags start at 1 (0 is news) and never repeat on a stream."""

    def __init__(self) -> None:
        self._next = 0
        self._waiting: dict[int, W] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def open(self, waiter: W) -> int:
        self._next += 1
        self._waiting[self._next] = waiter
        return self._next

    def forget(self, tag: int) -> None:
        """The waiter gave up (deadline, cancel): an answer arriving later is dropped."""
        self._waiting.pop(tag, None)

    def answered(self, tag: int) -> W | None:
        """Who waits for ``tag`` (removed), or None when nobody does any more (a late or unknown answer)."""
        return self._waiting.pop(tag, None)

    def fail_all(self) -> list[W]:
        """The stream ended: every waiter, to be told so (the book is empty afterwards)."""
        waiting, self._waiting = list(self._waiting.values()), {}
        return waiting


class NudgeKind(enum.Enum):
    JOIN = "join"  # RebalanceStarted: send JoinGroup now, not at the next heartbeat
    HEARTBEAT = "heartbeat"  # AssignmentChanged, TasksToGiveUp, a resync after a reconnect: heartbeat now
    MOVED = "moved"  # CoordinatorMoved: ask FindCoordinator again (or go to the hint), then heartbeat there


@dataclass(frozen=True)
class Nudge:
    """What a member does now about news on its stream (its own rules stay what they are without it)."""

    kind: NudgeKind
    generation: int = -1  # RebalanceStarted's generation (-1: not given)
    hint: str = ""  # CoordinatorMoved's new address, when known


RESYNC = Nudge(NudgeKind.HEARTBEAT)
"""Sent to every member of a stream that reconnected: its next heartbeat re-sends its state in full."""


def nudge_for(news: pb.SessionNews) -> Nudge | None:
    """The member's move for ``news`` (None for news this client does not know: ignored)."""
    which = news.WhichOneof("news")
    if which == "rebalance_started":
        return Nudge(NudgeKind.JOIN, generation=news.rebalance_started.generation)
    if which in ("assignment_changed", "tasks_to_give_up"):
        return Nudge(NudgeKind.HEARTBEAT)
    if which == "coordinator_moved":
        return Nudge(NudgeKind.MOVED, hint=news.coordinator_moved.coordinator_hint)
    return None


Hearer = Callable[[Nudge], None]


class Hearers:
    """Who hears the news for each (group, member) on one stream: the transport that last sent for it. A
    transport holds one member id per group (a member that joined again as a new one replaces its old id)."""

    def __init__(self) -> None:
        self._by_member: dict[tuple[str, str], Hearer] = {}
        self._member_of: dict[tuple[Hearer, str], str] = {}
        self._naming: dict[int, tuple[str, Hearer]] = {}  # tag of a request with no member id yet -> who hears

    def sent(self, tag: int, request: Any, hearer: Hearer) -> None:
        """``hearer`` sent ``request`` under ``tag``: it hears its member's news from now on, or, for a member
        with no id yet (a consumer member's first GroupHeartbeat), from the answer that names it: the
        coordinator tells a newcomer its first target at once, before it sends anything under its id."""
        group_id, member_id = member_of(request)
        if member_id:
            self.listen(group_id, member_id, hearer)
        elif group_id:
            self._naming[tag] = (group_id, hearer)

    def answered(self, tag: int, answer: Any) -> None:
        """The answer to ``tag`` came (before it is handed over, so news read right after it is heard)."""
        naming = self._naming.pop(tag, None)
        member_id = getattr(answer, "member_id", "")
        if naming is not None and member_id:
            self.listen(naming[0], member_id, naming[1])

    def unanswered(self, tag: int | None = None) -> None:
        """``tag`` (None: every tag) will get no answer: nothing to learn from it."""
        if tag is None:
            self._naming.clear()
        else:
            self._naming.pop(tag, None)

    def __len__(self) -> int:
        return len(self._by_member)

    def listen(self, group_id: str, member_id: str, hearer: Hearer) -> None:
        if not member_id:
            return
        before = self._member_of.get((hearer, group_id))
        if before is not None and before != member_id and self._by_member.get((group_id, before)) == hearer:
            del self._by_member[(group_id, before)]
        self._member_of[(hearer, group_id)] = member_id
        self._by_member[(group_id, member_id)] = hearer

    def drop(self, hearer: Hearer) -> None:
        """A transport left this stream (closed, or moved to another coordinator)."""
        for key in [key for key, known in self._by_member.items() if known == hearer]:
            del self._by_member[key]
        for held in [held for held in self._member_of if held[0] == hearer]:
            del self._member_of[held]

    def tell(self, news: pb.SessionNews) -> bool:
        """Pass ``news`` to its member's transport; False when nobody here holds that member."""
        nudge = nudge_for(news)
        hearer = self._by_member.get((news.group_id, news.member_id))
        if nudge is None or hearer is None:
            return False
        _call(hearer, nudge)
        return True

    def resync(self) -> int:
        """The stream reconnected: every member heartbeats now (its full state, no rejoin). Returns how many."""
        hearers = set(self._by_member.values())
        for hearer in hearers:
            _call(hearer, RESYNC)
        return len(hearers)


def _call(hearer: Hearer, nudge: Nudge) -> None:
    try:
        hearer(nudge)
    except Exception:  # a bad hearer never breaks the stream's reader
        log.exception("a member's news handler failed on %s", nudge)


def member_of(request: Any) -> tuple[str, str]:
    """(group_id, member_id) a request speaks for ('' member before it has one)."""
    return getattr(request, "group_id", ""), getattr(request, "member_id", "")


class Registry(Generic[S]):
    """One stream per key (address, credentials, loop) in a process, shared by every transport that asks;
    counted, so the last one to let go closes it. One owner: a lock, or one loop."""

    def __init__(self) -> None:
        self._streams: dict[Hashable, tuple[S, int]] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def acquire(self, key: Hashable, make: Callable[[], S]) -> S:
        """The stream of ``key``, made by ``make`` when nobody holds one."""
        known = self._streams.get(key)
        stream, users = (make(), 0) if known is None else known
        self._streams[key] = (stream, users + 1)
        return stream

    def release(self, key: Hashable) -> S | None:
        """One user less; the stream to close when that was the last one."""
        known = self._streams.get(key)
        if known is None:
            return None
        stream, users = known
        if users > 1:
            self._streams[key] = (stream, users - 1)
            return None
        del self._streams[key]
        return stream

    def users(self, key: Hashable) -> int:
        known = self._streams.get(key)
        return 0 if known is None else known[1]


@dataclass
class _Attempt:
    """The one field of tenacity's RetryCallState its wait strategies read."""

    attempt_number: int


def reconnect_wait(failures: int, max_s: float) -> float:
    """Seconds before the next attempt to open a stream after ``failures`` in a row (unary calls meanwhile):
    50 ms doubling, with up to 50 ms of jitter so a fleet cut at once does not come back at once."""
    wait = tenacity.wait_exponential_jitter(multiplier=0.05, max=max(0.05, max_s), jitter=0.05)
    return float(wait(_Attempt(max(1, failures))))  # type: ignore[arg-type]


@dataclass
class Remembered:
    """Addresses (stream keys) whose coordinator answered UNIMPLEMENTED: unary there, asked again after
    ``recheck_s`` (a coordinator upgraded in a rolling restart offers the stream again)."""

    recheck_s: float = 600.0
    since: dict[Hashable, float] = field(default_factory=dict)

    def unary(self, key: Hashable, now: float) -> bool:
        at = self.since.get(key)
        if at is None:
            return False
        if now - at >= self.recheck_s:
            del self.since[key]
            return False
        return True

    def note(self, key: Hashable, now: float) -> None:
        self.since[key] = now
