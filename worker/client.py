"""The embeddable worker client: join a group, run what it is assigned, stay alive.

A thin driver of the member core (``worker.member``), which decides everything: one background
thread walks the core's steps and carries out what they ask (``worker.effects``): the calls over
``worker.transport`` (deadlines, rediscovery, cancel, leave), the sleeps, the listener's callbacks
(on this thread), the load reporter. ``AsyncWorkerClient`` drives the same core on an event loop.

Heartbeats run only in Stable (the same thread does both, so they are off while
joining or syncing). Before re-joining the worker revokes (stops) its tasks: the
eager protocol. In Stable, losing the coordinator does not stop tasks until the
session timeout has passed without a successful heartbeat (a coordinator failover
keeps tasks running); calls in Stable give up after half the session, so a hung
coordinator is left in time to reach the new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Self

from prometheus_client import CollectorRegistry

from groupcoord.assignors.registry import get_assignor
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import AskLoad, Call, Deliver, Effect, Joined, Offload, Sleep, Steps, advance
from groupcoord.worker.leader import AssignorLookup
from groupcoord.worker.listener import JoinListener, TaskListener
from groupcoord.worker.ownership import Notice
from groupcoord.worker.states import WorkerState
from groupcoord.worker.stopping import STOP_SIGNALS, block_until_signal
from groupcoord.worker.stream_tags import Nudge
from groupcoord.worker.transport import ChannelFactory, Transport, WorkerClosedError
from groupcoord.worker.view import MemberView, transport_settings

__all__ = ["JoinListener", "TaskListener", "WorkerClient", "WorkerClosedError", "WorkerState"]

log = logging.getLogger("groupcoord.worker")

LoadReportCallback = Callable[["WorkerClient"], "pb.LoadReport | None"]
"""What ``load_reporter`` is: ``worker.load.LoadReporter`` is one."""


class WorkerClient(MemberView):
    """Join ``config.group_id`` and keep ``listener`` told what this process must run.

    Use ``start()`` then ``close()`` (or a ``with`` block). ``generation`` and
    ``assigned_tasks`` let a service fence its own side effects: act on a task
    only while it is assigned in the current generation.
    """

    _transport: Transport

    def __init__(
        self,
        config: WorkerConfig,
        listener: TaskListener,
        *,
        assignor_lookup: AssignorLookup = get_assignor,
        channel_factory: ChannelFactory | None = None,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        load_reporter: LoadReportCallback | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.listener = listener
        self._closing = threading.Event()
        self._sleep = sleep or self._wait_unless_closing
        self._load_reporter = load_reporter
        self._cond = threading.Condition()
        self._transport = Transport(config.coordinators, channel_factory, **transport_settings(config))
        self._make_member(config, assignor_lookup=assignor_lookup, monotonic=monotonic,
                          metrics_registry=metrics_registry, wake=self._wake_waiters, on_tasks=self._wake_waiters,
                          load_reports=load_reporter is not None)
        self._nudged = threading.Event()  # news on the stream cuts the heartbeat wait short
        self._transport.streams.on_nudge = self._hear
        self._thread = threading.Thread(target=self._run, name=f"groupcoord-worker-{config.client_id}", daemon=True)

    # ------------------------------------------------------------------ public API (and MemberView's)

    def start(self) -> Self:
        if self._thread.ident is not None:
            raise RuntimeError("a WorkerClient can be started once")
        self._member.machine.fire("start")
        self._thread.start()
        return self

    def wait_until(self, predicate: Callable[[WorkerClient], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked at every state change) or the timeout passes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopped_by_error():
                    return predicate(self)
                self._cond.wait(remaining)
        return True

    def wait_until_stable(self, timeout: float = 30.0) -> bool:
        """True once the worker is Stable; False when ``timeout`` passed first or the worker stopped (see
        ``fatal_error``). It never raises on a timeout: the worker goes on trying in the background."""
        return self.wait_until(lambda w: w.state is WorkerState.STABLE, timeout)

    def run_until_signal(self, signals: Sequence[int] = STOP_SIGNALS, *, leave_group: bool | None = None) -> int:
        """Block (the main thread) until SIGTERM or SIGINT, or a fatal error, then ``close()``: tasks revoked,
        LeaveGroup sent, the group rebalances at once. Returns the signal's number (0: a fatal error)."""
        return block_until_signal(self, signals, leave_group=leave_group)

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (the worker re-joins at its next heartbeat tick)."""
        self._member.rebalance_requested = True
        self._wake_waiters()

    def close(self, timeout: float = 10.0, *, leave_group: bool | None = None) -> None:
        """Stop tasks, leave the group (LeaveGroup) and stop the thread; a call in flight is cancelled.

        A static member (``instance_id``) does not leave by default: a restart within its session
        timeout then costs no rebalance. ``leave_group=True`` makes it leave (a scale-in),
        ``False`` keeps a dynamic member in the group until its session expires."""
        if leave_group is not None:
            self._member.leave_on_close = leave_group
        self._member.closing = True
        self._closing.set()
        self._nudged.set()
        self._transport.abort()
        self._wake_waiters()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._transport.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the driver

    def _run(self) -> None:
        try:
            self._drive(self._member.run())
        finally:
            self._drive(self._member.shutdown())

    def _drive(self, steps: Steps) -> None:
        """Carry out each effect the core yields, sending back its outcome (or throwing in its error)."""
        effect = advance(steps)
        while effect is not None:
            try:
                answer, error = self._carry_out(effect), None
            except Exception as failure:  # noqa: BLE001 - thrown into the core, whose rules decide
                answer, error = None, failure
            effect = advance(steps, answer, error)

    def _carry_out(self, effect: Effect) -> Any:
        if isinstance(effect, Call):
            method = getattr(self._transport, effect.method)
            if effect.give_up_in is None:
                return method(effect.request, effect.timeout)
            return method(effect.request, effect.timeout, (effect.give_up_in, self._give_up_unanswered))
        if isinstance(effect, Sleep):
            if effect.heartbeat and self._sleep == self._wait_unless_closing:
                self._nudged.wait(effect.seconds)
                self._nudged.clear()
            else:
                self._sleep(effect.seconds)
        elif isinstance(effect, Deliver):
            self._deliver(effect.notice)
            return True
        elif isinstance(effect, Joined):
            listener = self.listener
            if isinstance(listener, JoinListener):
                self._call_listener("on_joined", lambda: listener.on_joined(effect.member_id, effect.generation,
                                                                             effect.leader))
        elif isinstance(effect, AskLoad):
            return self._ask_load()
        elif isinstance(effect, Offload):
            return self._offload(effect.job, self._nudged.set)
        return None

    def _give_up_unanswered(self) -> None:
        for notice in self._member.give_up_unanswered():
            self._deliver(notice)

    def _ask_load(self) -> pb.LoadReport | None:
        assert self._load_reporter is not None
        try:
            return self._load_reporter(self)
        except Exception:
            log.exception("%s: load reporter failed", self.config.client_id)
            return None

    def _wait_unless_closing(self, seconds: float) -> None:
        self._closing.wait(seconds)

    def _hear(self, nudge: Nudge) -> None:
        """News on the stream (its reader's thread): the core decides; a heartbeat wait ends now if it says so."""
        if self._member.hear(nudge):
            self._nudged.set()

    def _wake_waiters(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _deliver(self, notice: Notice) -> None:
        """Tell the listener, on this thread; an exception is logged, never fatal."""
        self._call_listener(notice.callback, lambda: notice.call(self.listener))

    def _call_listener(self, callback: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception:
            log.exception("%s: listener %s raised; carrying on", self.config.client_id, callback)
