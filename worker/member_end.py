"""The end both member cores share (``worker.member``, classic; ``worker.consumer_member``): the run loop's
fatal-error tail, the shutdown, and the delivery of queued notices, written once.

The two protocols differ in their steps (join and sync, or one GroupHeartbeat) and in how they leave, not in
how a worker stops: a fatal row of ``worker.rules`` (or a bug) ends the loop with ``fatal_error`` set, then
``shutdown()`` revokes the tasks (or loses them, when the row says the coordinator may already have given
them away), tells the listener, leaves if the core says it may, and fires ``stop``: once.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

from groupcoord import errors
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import AskLoad, Call, Deliver, Effect, WorkerClosedError
from groupcoord.worker.ownership import Notice, Ownership
from groupcoord.worker.requests import load_request
from groupcoord.worker.rules import ErrorRule, rule_for
from groupcoord.worker.states import WorkerMachine, WorkerState

__all__ = ["MemberEnd"]

log = logging.getLogger("groupcoord.worker")

Gen = Generator[Effect, Any, Any]


class MemberEnd:
    """A member core's loop and end; the core supplies its steps (``_stable_tick``, ``_join_with_retry``),
    its leaves (``_leave``, ``_leave_after_hang``) and what a fatal row means for leaving (``_stopped_by``)."""

    config: WorkerConfig
    machine: WorkerMachine
    tasks: Ownership
    pending: list[Notice]
    closing: bool
    fatal_error: BaseException | None
    shut_down: bool
    _load_reports: bool

    def run(self) -> Gen:
        """Join and stay in the group until ``closing`` (or a fatal error: ``fatal_error``)."""
        try:
            while not self.closing:
                if self.machine.state is WorkerState.STABLE:
                    yield from self._stable_tick()
                else:
                    yield from self._join_with_retry()
        except WorkerClosedError:
            return
        except Exception as failure:
            self.fatal_error = failure
            rule = rule_for(failure)
            if rule is None:  # a bug: never die silently
                log.exception("%s: worker loop failed", self.config.client_id)
            else:
                self._stopped_by(rule)
                log.error("%s: stopping: %s", self.config.client_id, failure)

    def shutdown(self) -> Gen:
        """Revoke (or lose, when the fatal error's row says so) the tasks, leave if we should, and stop: once."""
        if self.shut_down:
            return
        self.shut_down = True
        try:
            rule = rule_for(self.fatal_error) if self.fatal_error is not None else None
            if rule is not None and rule.tasks_lost == "always":
                self.tasks.lose_all()
            else:
                self.tasks.revoke_all()
            yield from self._flush(leave_if_hung=False)
            yield from self._leave()
        finally:
            if self.machine.state is not WorkerState.DOWN:
                self.machine.fire("stop")

    def _flush(self, *, leave_if_hung: bool = True) -> Gen:
        """Deliver the queued notices in order. False when one hung (an asyncio listener past the
        rebalance timeout): then the member has left the group and must join again as a new one."""
        ok = True
        while self.pending:
            delivered = yield Deliver(self.pending.pop(0))
            if not delivered and ok:
                ok = False
                if leave_if_hung:
                    yield from self._leave_after_hang()
        return ok

    def _report_load(self, member_id: str, generation: int, timeout: float) -> Gen:
        """After an answered heartbeat: the load reporter's figures, when its policy says they are due (SPEC 3:
        reports travel as ReportLoad in both protocols; a failed one is logged and the next due one goes)."""
        if not self._load_reports:
            return
        report = yield AskLoad()
        if report is None:
            return
        try:
            yield Call("report_load", load_request(self.config, member_id, generation, report), timeout)
        except errors.GroupCoordError as error:
            log.info("%s: load report not sent: %s", self.config.client_id, error)

    # ------------------------------------------------------------------ what each core supplies

    def _stable_tick(self) -> Gen:
        raise NotImplementedError

    def _join_with_retry(self) -> Gen:
        raise NotImplementedError

    def _leave(self) -> Gen:
        raise NotImplementedError

    def _leave_after_hang(self) -> Gen:
        raise NotImplementedError

    def _stopped_by(self, rule: ErrorRule) -> None:
        """The loop ended on this fatal row: note whether the member may still leave the group."""
        raise NotImplementedError
