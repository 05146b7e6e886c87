"""Answers to waiting requests: each request's answer callback kept by its token, and a reply's
completion (``Reply.complete``: an answer too heavy to build on the event loop) run on a checker
thread before the answer goes out. Also the model's ``Offload`` jobs, which come back the same way.

A group's answers go out in the order the model gave them, a completion included: the ones after it
wait for it, and are answered from the event loop's next turn on, ``RELEASE_PER_TURN`` a turn, so
that a Session stream's writer sends it before their answers are even made, and the streams read (the
leader's SyncGroup) and write between their shares. A join phase's end answers the leader first (its answer
is the one with a completion), so the leader hears before its followers and its SyncGroup is not read
behind theirs: answered as each came, the leader's went out last, and with 3,000 members on three
streams its SyncGroup reached the coordinator behind 2,599 of theirs (docs/scaling.md).

One job of the runtime (``coordinator.runtime.runtime``); it decides nothing about groups.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from google.protobuf.message import Message

from groupcoord.coordinator.model.effects import Effect, Offload, Reply, Token, error, error_response
from groupcoord.coordinator.runtime.checkers import CheckerPool
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["RELEASE_PER_TURN", "Answer", "Replies"]

log = logging.getLogger("groupcoord.runtime")
Answer = Callable[[Message], None]
RELEASE_PER_TURN = 500
"""Replies that waited for a completion answered per turn of the event loop (each answer's request then runs
on: a Session stream's serialising and queueing): between turns the streams read and write."""


class Replies:
    """The answers of the requests a runtime has taken and not yet answered."""

    def __init__(self, checkers: CheckerPool) -> None:
        self._checkers = checkers
        self._tokens = itertools.count(1)
        self._answers: dict[Token, Answer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # set by ``attach``: completions run off it
        self._behind: dict[str, deque[Reply]] = {}  # group id -> its replies waiting for a completion

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def waiting(self) -> int:
        """How many requests wait for their answer."""
        return len(self._answers)

    def take(self, answer: Answer) -> Token:
        """Keep ``answer`` until its token is answered; returns the token."""
        token = next(self._tokens)
        self._answers[token] = answer
        return token

    def answer(self, token: Token, response: Message) -> None:
        """Answer ``token`` with ``response`` (nothing if it was answered already)."""
        answer = self._answers.pop(token, None)
        if answer is not None:
            answer(response)

    def refuse(self, replies: list[Reply], failed: pb.Error) -> None:
        """Answer each of ``replies`` with the error ``failed`` instead of its response."""
        for reply in replies:
            self.answer(reply.to, error_response(type(reply.response), failed))

    def deliver(self, reply: Reply) -> None:
        """Answer ``reply``, once its ``complete`` has run: inline when no loop is attached (tests,
        tools), else on a checker thread and back on the loop, its group's later replies behind it."""
        waiting = self._behind.get(reply.group_id) if reply.group_id else None
        if waiting is not None:
            waiting.append(reply)
            return
        self._send(reply)

    def _send(self, reply: Reply) -> None:
        complete = reply.complete
        if complete is None:
            self.answer(reply.to, reply.response)
            return
        loop = self._loop
        if loop is None:
            complete()
            self.answer(reply.to, reply.response)
            return
        if reply.group_id:
            self._behind.setdefault(reply.group_id, deque())

        def completed(future: asyncio.Future[None]) -> None:
            failure = future.exception() if not future.cancelled() else None
            if future.cancelled() or failure is not None:
                log.error("completing an answer failed: %s", failure or "cancelled")
                self.answer(reply.to, error_response(type(reply.response), error(
                    pb.COORDINATOR_NOT_AVAILABLE, "the coordinator could not complete its answer")))
            else:
                self.answer(reply.to, reply.response)
            # the others on the loop's next turn: its answer is then written before 10,000 of theirs are made
            loop.call_soon(self._release, reply.group_id)

        self._checkers.start(loop, complete).add_done_callback(completed)

    def _release(self, group_id: str) -> None:
        """``RELEASE_PER_TURN`` of the group's replies that waited for a completion, in order, and the rest on
        the loop's next turns (behind the next completion, if one comes): a turn's answers are made and
        queued at once, so 10,000 in one turn kept the streams' readers and writers waiting for all of them."""
        waiting = self._behind.get(group_id) if group_id else None
        if waiting is None:
            return
        for _ in range(min(len(waiting), RELEASE_PER_TURN)):
            reply = waiting.popleft()
            if reply.complete is not None:
                self._send(reply)  # the rest wait for it: its completion releases them
                return
            self.answer(reply.to, reply.response)
        if waiting:
            assert self._loop is not None  # only a completion on the loop queues replies
            self._loop.call_soon(self._release, group_id)
        else:
            del self._behind[group_id]

    def offload(self, effect: Offload, carry_out: Callable[[list[Effect]], None],
                still_current: Callable[[], bool]) -> None:
        """``effect.job`` off the loop (inline without one: tests, tools), then its ``then`` carried out
        on the loop, unless ``still_current()`` says the runtime's term ended meanwhile."""
        loop = self._loop
        if loop is None:
            try:
                result: Any = effect.job()
            except Exception as failure:  # noqa: BLE001  # the model records it; nothing else stops
                result = failure
            carry_out(effect.then(result))
            return
        outcome: list[Any] = []

        def job() -> None:
            outcome.append(effect.job())

        def done(future: asyncio.Future[None]) -> None:
            if future.cancelled() or not still_current():
                return
            failure = future.exception()
            carry_out(effect.then(failure if failure is not None else outcome[0]))

        self._checkers.start(loop, job).add_done_callback(done)
