"""What the group model asks the runtime to do: its only way to touch the world.

The model (``coordinator.model.model``) never writes a store, answers a socket or
reads a real clock. Each request or timer it handles returns a list of
effects, and ``coordinator.runtime.runtime`` carries them out in this order:

1. ``Persist`` / ``Forget``: queue the group's record write (off the event loop);
2. ``ArmTimer`` / ``CancelTimer``: keyed timers on the injected clock;
3. ``RecordLoad``: hand a load report to the sample log; ``Count``: add to a metric;
4. ``Reply``: answer a request, but only once every write of its group queued
   so far is durable (a member never hears of a change the store may lose), and
   once its ``complete`` (the heavy part of a large answer) has run off the loop.

``Outbox`` collects them while a handler runs; a group marked dirty several
times in one step is written once, with its state at the end of the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

from google.protobuf.message import Message

from groupcoord.v1 import groupcoord_pb2 as pb


class HasGroupId(Protocol):
    """What the outbox needs of a group (``model.group.Group`` or a consumer group): its id (the record is
    built by ``to_record``)."""

    group_id: str

__all__ = [
    "Token",
    "TimerKey",
    "Reply",
    "Persist",
    "Forget",
    "ArmTimer",
    "CancelTimer",
    "RecordLoad",
    "Count",
    "Offload",
    "Effect",
    "Outbox",
    "OK",
    "error",
    "error_response",
]

Token = int
"""Names one request waiting for its answer; issued by the runtime, opaque to the model."""


class TimerKey(NamedTuple):
    """One timer per key: scheduling a key again replaces its deadline (Kafka's CoordinatorTimer)."""

    kind: str  # "join" | "sync" | "session" | "pending"
    group_id: str
    member_id: str = ""


# The effects every request makes (a reply, its member's session timer) are not ``frozen``: a frozen
# dataclass's ``__init__`` sets each field through ``object.__setattr__``, several times the cost of a plain
# one (2.8 against 0.3 µs for a timer, loaded), and a rebalance of 10,000 makes 40,000 of them. No code
# changes an effect once made, and none is hashed.
@dataclass(slots=True)
class Reply:
    to: Token
    group_id: str  # "" when no group's write needs to land first
    response: Message
    # fills in the heavy part of ``response`` (a 100,000-task catalog) from data that will not
    # change; the runtime runs it on a checker thread, not the event loop, before answering
    complete: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class Persist:
    """Write a group. Whole (``parts`` None): ``record`` replaces the group and every per-member record
    (its ``parts`` entry, if any, lists them all). Per member (``parts`` given, a consumer group): the
    records in ``parts`` are set (a None value: deleted) and ``record``, unless None (unchanged),
    replaces the group's own, in one atomic write: a change of k members writes O(k)."""

    group_id: str
    record: dict[str, Any] | None
    parts: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Forget:
    group_id: str


@dataclass(slots=True)
class ArmTimer:
    key: TimerKey
    delay_s: float


@dataclass(slots=True)
class CancelTimer:
    key: TimerKey


@dataclass(frozen=True, slots=True)
class RecordLoad:
    group_id: str
    member_id: str
    report: pb.LoadReport


@dataclass(frozen=True, slots=True)
class Count:
    """Something worth a metric happened (e.g. an ownership claim ignored): the runtime counts it."""

    what: str
    amount: int = 1


@dataclass(frozen=True, slots=True)
class Offload:
    """Work too heavy for the event loop (a consumer group's server-side assignor): the runtime runs
    ``job`` on a checker thread, then ``then(its result, or the exception it raised)`` back on the
    loop and carries out the effects that returns. Dropped if the runtime's term ended meanwhile."""

    job: Callable[[], Any]
    then: Callable[[Any], list[Effect]]


Effect = Reply | Persist | Forget | ArmTimer | CancelTimer | RecordLoad | Count | Offload


def error(code: pb.ErrorCode, message: str = "", hint: str = "") -> pb.Error:
    return pb.Error(code=code, message=message or pb.ErrorCode.Name(code), coordinator_hint=hint)


OK = error(pb.NONE, "NONE")
"""The error of every answer that succeeded."""


def error_response(response_type: type[Message], failure: pb.Error) -> Message:
    """``response_type`` carrying only ``failure`` (and generation -1 where the type has one)."""
    response: Any = response_type()
    response.error.CopyFrom(failure)
    if "generation" in response.DESCRIPTOR.fields_by_name:
        response.generation = -1
    return cast(Message, response)


class Outbox:
    """Collects one step's effects; ``effects()`` hands them over in the runtime's order."""

    __slots__ = ("_dirty", "_forget", "_loads", "_replies", "_timers", "_to_record")

    def __init__(self, to_record: Callable[[Any], dict[str, Any] | Persist]) -> None:
        """``to_record``: a group's record, or its write when only part of it changed."""
        self._to_record = to_record
        self._dirty: dict[str, HasGroupId] = {}
        self._forget: list[str] = []
        self._timers: list[Effect] = []
        self._loads: list[Effect] = []
        self._replies: list[Effect] = []

    def reply(self, to: Token | None, group_id: str, response: Message,
              complete: Callable[[], None] | None = None) -> None:
        if to is not None:
            self._replies.append(Reply(to, group_id, response, complete))

    def fail(self, to: Token | None, group_id: str, response_type: type[Message], failure: pb.Error) -> None:
        self.reply(to, group_id, error_response(response_type, failure))

    def persist(self, group: HasGroupId) -> None:
        self._dirty[group.group_id] = group

    def forget(self, group_id: str) -> None:
        self._dirty.pop(group_id, None)
        self._forget.append(group_id)

    def arm(self, key: TimerKey, delay_s: float) -> None:
        self._timers.append(ArmTimer(key, delay_s))

    def cancel(self, key: TimerKey) -> None:
        self._timers.append(CancelTimer(key))

    def record_load(self, group_id: str, member_id: str, report: pb.LoadReport) -> None:
        self._loads.append(RecordLoad(group_id, member_id, report))

    def count(self, what: str, amount: int = 1) -> None:
        self._loads.append(Count(what, amount))

    def offload(self, job: Callable[[], Any], then: Callable[[Any], list[Effect]]) -> None:
        self._loads.append(Offload(job, then))

    def effects(self) -> list[Effect]:
        if not self._dirty and not self._forget and not self._loads:  # a heartbeat: a timer and a reply
            return self._timers + self._replies
        writes: list[Effect] = []
        for group in self._dirty.values():
            drafted = self._to_record(group)
            if not isinstance(drafted, Persist):
                writes.append(Persist(group.group_id, drafted))
            elif drafted.record is not None or drafted.parts:  # else nothing changed: nothing to write
                writes.append(drafted)
        writes.extend(Forget(group_id) for group_id in self._forget)
        return writes + self._timers + self._loads + self._replies
