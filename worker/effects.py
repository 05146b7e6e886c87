"""What the member core asks its driver to do, and how a driver walks the core's steps.

The core (``worker.member``) is written as generators in the shape of ``worker.transport.lookup_round``
(and h11's): each ``yield`` hands the driver one effect below, and the driver sends back what came of
it (a call's answer, whether a listener returned in time, a load report) or throws in the error the
call failed with. ``WorkerClient`` carries the effects out on its thread, ``AsyncWorkerClient`` on the
service's loop; neither decides anything.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from google.protobuf.message import Message

from groupcoord.worker.ownership import Notice

__all__ = ["AskLoad", "Call", "Deliver", "Effect", "Joined", "Offload", "Running", "Sleep", "Steps", "WorkerClosedError",
           "advance"]


class WorkerClosedError(RuntimeError):
    """The client was closed, or stopped on a fatal error (see ``fatal_error``)."""


Method = Literal["join_group", "sync_group", "heartbeat", "report_load", "describe_group", "leave_group",
                 "group_heartbeat", "group_leave"]
"""The transport's calls; ``group_heartbeat`` and ``group_leave`` are the consumer protocol's GroupHeartbeat
(a leave, -1 or -2, is best effort like ``leave_group``: it answers True or False and never raises)."""


@dataclass(frozen=True)
class Call:
    """Make this call on the transport (the method of that name); send back its answer, or throw its error.

    ``give_up_in``: a JoinGroup or SyncGroup that is still unanswered after these seconds makes the driver
    call ``Member.give_up_unanswered()`` and deliver what it returns, then go on waiting for the answer."""

    method: Method
    request: Message
    timeout: float
    give_up_in: float | None = None


@dataclass(frozen=True)
class Sleep:
    """Wait ``seconds``; ``heartbeat``: the wait before a heartbeat, which ``request_rebalance`` may cut short."""

    seconds: float
    heartbeat: bool = False


@dataclass(frozen=True)
class Deliver:
    """Tell the listener (and ``changes()`` readers) ``notice``; send back False when it hung past the
    rebalance timeout (only an asyncio listener can: the threaded driver always sends True)."""

    notice: Notice


@dataclass(frozen=True)
class Joined:
    """Call ``on_joined`` if the listener has it (a ``JoinListener``)."""

    member_id: str
    generation: int
    leader: bool


@dataclass(frozen=True)
class AskLoad:
    """Call the service's load reporter; send back its report, or None (none given, or it failed)."""


@dataclass(frozen=True)
class Offload:
    """Start ``job`` on a thread of the driver's and send back its handle (a ``Running``) at once; when the
    job is done, end a heartbeat wait (``Sleep(heartbeat=True)``), so its result goes out without waiting
    an interval. For work that must not hold the heartbeats: a consumer-protocol leader's assignor."""

    job: Callable[[], Any]


class Running(Protocol):
    """What ``Offload`` sends back (a ``concurrent.futures.Future`` is one): the core polls it."""

    def done(self) -> bool: ...
    def result(self) -> Any: ...


Effect = Call | Sleep | Deliver | Joined | AskLoad | Offload
Steps = Generator[Effect, Any, Any]


def advance(steps: Steps, answer: Any = None, error: BaseException | None = None) -> Effect | None:
    """The next effect of ``steps`` after ``answer`` (or ``error`` thrown in), or None once they end."""
    try:
        return steps.throw(error) if error is not None else steps.send(answer)
    except StopIteration:
        return None
