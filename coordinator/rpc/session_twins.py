"""How a Session stream's message reaches its unary twin's model step (``coordinator.rpc.service``).

Most messages are stepped **from the stream's reader, with no task of their own** (``step_on_loop``): the
twin's own step (``CoordinatorServicer.on_loop``), its answer handed back by the runtime when ready (at
once, or when a held JoinGroup or SyncGroup completes, or its group's write lands). A rebalance of N
members is 2N such requests in a burst, and a task each (created, scheduled, resumed on its answer's
future) was a fifth of the coordinator's CPU per member. A message whose twin checks something off the
loop first (a leader's large assignment, a large load report) runs the twin's coroutine in a task, with
``TwinContext`` as its context: an abort there becomes that message's answer, not the stream's end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NoReturn

import grpc
from google.protobuf.message import Message

from groupcoord.coordinator.auth.guard import CURRENT_PRINCIPAL
from groupcoord.coordinator.model.effects import error, error_response
from groupcoord.coordinator.rpc.service import CoordinatorServicer
from groupcoord.coordinator.rpc.session_envelope import Body
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["Aborted", "TwinContext", "aborted_answer", "step_on_loop"]

log = logging.getLogger("groupcoord.session")
_ABORT_CODES = {grpc.StatusCode.INVALID_ARGUMENT: pb.INVALID_REQUEST}  # else COORDINATOR_NOT_AVAILABLE


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class TwinContext:
    """The unary twin's ``context`` as a stream's message gives it: the stream's peer, and an abort that
    becomes that message's in-band answer instead of the end of the stream."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise Aborted(code, details)


def aborted_answer(body: Body, code: grpc.StatusCode, details: str) -> Message:
    """The in-band answer to a message whose twin aborted (its unary call would have ended with ``code``)."""
    return error_response(body.response, error(_ABORT_CODES.get(code, pb.COORDINATOR_NOT_AVAILABLE),
                                               f"{body.method_name}: {details}"))


def step_on_loop(servicer: CoordinatorServicer, body: Body, request: Any, host: str,
                 answer: Callable[[Message], None]) -> bool:
    """Step ``request`` now, ``answer`` called exactly once with its answer (now, or from the step that makes it
    ready: it must not raise into that step, whose other effects would be lost); False when its twin must
    check something off the loop first (run the twin then). A step that fails is answered as its twin's would
    be (INTERNAL there, so COORDINATOR_NOT_AVAILABLE here) and logged."""
    step = servicer.on_loop(body.method_name, request, host, CURRENT_PRINCIPAL.get())
    if step is None:
        return False
    answered = False

    def once(response: Message) -> None:  # called from any step's effects: it must never break them
        nonlocal answered
        if answered:
            return
        answered = True
        try:
            answer(response)
        except Exception:
            log.exception("the answer to a %s on a Session stream was lost", body.method_name)

    try:
        step.runtime.submit(step.step, step.response_type, once)
    except Exception:
        log.exception("%s failed on %s", body.method_name, type(request).__name__)
        once(aborted_answer(body, grpc.StatusCode.INTERNAL,
                            f"{body.method_name}: internal error (see coordinator log)"))
    return True
