"""The worker client for asyncio services: the same member as ``WorkerClient``, on the service's loop.

A peer of the threaded client, not a wrapper: both drive the same member core (``worker.member``),
which decides everything; this module only carries out its effects (``worker.effects``) the asyncio
way. One task on the service's loop joins, syncs and heartbeats (no thread of its own), ``grpc.aio``
carries the calls.

Listeners may be coroutines: ``on_revoked``, ``on_assigned``, ``on_lost`` (and ``on_joined``) are
awaited in order before the protocol goes on, so a service stops a task cleanly before the worker
re-joins. Each call is bounded by the rebalance timeout: a listener still running then is
cancelled and logged, and the member leaves the group (LeaveGroup), as Kafka's consumer leaves
when its poll loop stalls past ``max.poll.interval.ms``; it then joins again as a new member.
``changes()`` gives the same notices as an async iterator, waiting for the loop body to finish
each one just as it waits for a listener.

Heartbeats are paused while a listener runs (as in the threaded client): keep listeners short of
the session timeout, and start long work in tasks of its own. A service that blocks its loop
delays the heartbeats by as long: ``worker.loop_lag`` measures it and logs it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from prometheus_client import CollectorRegistry

from groupcoord.assignors.registry import get_assignor
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.worker.aio_transport import AioChannelFactory, AsyncTransport
from groupcoord.worker.changes import ChangeStream
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.effects import AskLoad, Call, Deliver, Effect, Joined, Offload, Sleep, Steps, advance
from groupcoord.worker.leader import AssignorLookup
from groupcoord.worker.listener import JoinListener
from groupcoord.worker.loop_lag import LoopLag, probe_for
from groupcoord.worker.ownership import Notice
from groupcoord.worker.states import WorkerState
from groupcoord.worker.stopping import STOP_SIGNALS, wait_for_signal
from groupcoord.worker.stream_tags import Nudge
from groupcoord.worker.view import MemberView, transport_settings

__all__ = ["AssignmentChange", "AsyncWorkerClient"]

log = logging.getLogger("groupcoord.worker")

_Answer = TypeVar("_Answer")

AssignmentChange = Notice
"""What ``changes()`` yields: ``kind`` ("assigned", "revoked", "lost"), ``tasks``, ``generation``."""

AsyncLoadReportCallback = Callable[["AsyncWorkerClient"], "pb.LoadReport | None | Awaitable[pb.LoadReport | None]"]


class AsyncWorkerClient(MemberView):
    """Join ``config.group_id`` from a task on the running loop and keep ``listener`` told what to run.

    ``async with AsyncWorkerClient(config, listener) as client: ...`` (or ``await start()`` and
    ``await close()``). ``listener`` may be None when the service reads ``changes()`` instead.
    Cancelling the task that owns the ``async with`` closes the client: a dynamic member leaves,
    a static one keeps its instance for a restart within its session.
    """

    _transport: AsyncTransport

    def __init__(
        self,
        config: WorkerConfig,
        listener: object | None = None,
        *,
        assignor_lookup: AssignorLookup = get_assignor,
        channel_factory: AioChannelFactory | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        load_reporter: AsyncLoadReportCallback | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.listener = listener
        self._monotonic = monotonic
        self._load_reporter = load_reporter
        self._transport = AsyncTransport(config.coordinators, channel_factory, **transport_settings(config))
        self._make_member(config, assignor_lookup=assignor_lookup, monotonic=monotonic,
                          metrics_registry=metrics_registry, wake=self._poke, load_reports=load_reporter is not None)
        self._transport.streams.on_nudge = self._hear
        self._streams: weakref.WeakSet[ChangeStream] = weakref.WeakSet()
        self._changed: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Future[Any] | None = None
        self._probe_key: int | None = None
        self.loop_lag = LoopLag()
        """How late the service's loop ran while this client was up (see ``worker.loop_lag``)."""

    # ------------------------------------------------------------------ public API (and MemberView's)

    async def start(self) -> Self:
        """Start joining, on the running loop (returns at once; ``wait_until_stable`` waits)."""
        if self._task is not None:
            raise RuntimeError("an AsyncWorkerClient can be started once")
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._probe_key = probe_for(loop, self._monotonic).watch(self._loop_was_late)
        self._member.machine.fire("start")
        self._task = loop.create_task(self._run(), name=f"groupcoord-worker-{self.config.client_id}")
        return self

    async def close(self, *, leave_group: bool | None = None) -> None:
        """Stop tasks (listeners awaited), leave the group (LeaveGroup), stop the client's task.

        A static member (``instance_id``) does not leave by default: a restart within its session
        timeout then costs no rebalance. ``leave_group=True`` makes it leave (a scale-in),
        ``False`` keeps a dynamic member in the group until its session expires."""
        if leave_group is not None:
            self._member.leave_on_close = leave_group
        if self._closed:
            return
        self._member.closing = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            if task is not None:
                await self._shutdown()
        finally:
            self._closed = True
            self._end_streams()
            self._unwatch_loop()
            await self._transport.close()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    def __enter__(self) -> None:
        raise TypeError("AsyncWorkerClient is used with 'async with' (the threaded WorkerClient takes 'with')")

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ never succeeds
        pass

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        if getattr(self, "_task", None) is not None and not self._closed:
            _warn(f"unclosed AsyncWorkerClient {self.config.client_id!r} of group {self.config.group_id!r}: "
                  "use 'async with' or 'await client.close()'", ResourceWarning, source=self)

    async def wait_until(self, predicate: Callable[[AsyncWorkerClient], bool], timeout: float) -> bool:
        """Wait until ``predicate(self)`` holds (checked at every change) or the timeout passes."""
        deadline = self._monotonic() + timeout
        while not predicate(self):
            changed = self._changed
            remaining = deadline - self._monotonic()
            if changed is None or remaining <= 0 or self._stopped_by_error() or self._closed:
                return predicate(self)
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass
        return True

    async def wait_until_stable(self, timeout: float = 30.0) -> bool:
        """True once the worker is Stable; False when ``timeout`` passed first or the worker stopped (see
        ``fatal_error``). It never raises on a timeout: the worker goes on trying in the background."""
        return await self.wait_until(lambda w: w.state is WorkerState.STABLE, timeout)

    async def run_until_signal(self, signals: Sequence[int] = STOP_SIGNALS, *,
                               leave_group: bool | None = None) -> int:
        """Serve until SIGTERM or SIGINT (or a fatal error), then ``close()``: tasks revoked (listeners
        awaited), LeaveGroup sent, the group rebalances at once. Returns the signal's number (0: a fatal error)."""
        return await wait_for_signal(self, signals, leave_group=leave_group)

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (the worker re-joins at once)."""
        self._member.rebalance_requested = True
        if self._wake is not None:
            self._wake.set()

    def changes(self) -> AsyncIterator[AssignmentChange]:
        """Every change from now on, in order: ``async for change in client.changes()``.

        The client goes on only when the loop body has finished with a change (it asks for the next
        one), within the rebalance timeout, as it awaits a listener. The iteration ends when the
        client closes. Leave the loop with ``break`` to stop listening."""
        stream = ChangeStream()
        self._streams.add(stream)
        if self._closed:
            stream.end()
        return stream

    # ------------------------------------------------------------------ the driver

    async def _run(self) -> None:
        try:
            await self._drive(self._member.run())
        except asyncio.CancelledError:
            if not self._member.closing:  # the loop is shutting down under us (e.g. asyncio.run ended): leave
                self._member.closing = True
                await self._shutdown()
            raise
        if self._member.fatal_error is not None:
            await self._shutdown()

    async def _shutdown(self) -> None:
        """The core's end (tasks revoked or lost, listeners awaited, LeaveGroup if we should): once."""
        if self._member.shut_down:
            return
        try:
            running = self._listener_task  # a listener call close() cut short: let it finish (bounded)
            if running is not None and not running.done() and running is not asyncio.current_task():
                await asyncio.wait({running}, timeout=self._listener_timeout())
            await self._drive(self._member.shutdown())
        finally:
            self._end_streams()
            self._unwatch_loop()

    async def _drive(self, steps: Steps) -> None:
        """Carry out each effect the core yields, sending back its outcome (or throwing in its error);
        a cancellation closes the core's steps (their ``finally`` runs) and goes on up."""
        effect = advance(steps)
        while effect is not None:
            try:
                answer, error = await self._carry_out(effect), None
            except asyncio.CancelledError:
                steps.close()
                raise
            except Exception as failure:  # noqa: BLE001 - thrown into the core, whose rules decide
                answer, error = None, failure
            effect = advance(steps, answer, error)

    async def _carry_out(self, effect: Effect) -> Any:
        if isinstance(effect, Call):
            call = getattr(self._transport, effect.method)(effect.request, effect.timeout)
            return await (call if effect.give_up_in is None else self._answer_or_give_up(call, effect.give_up_in))
        if isinstance(effect, Sleep):
            await (self._sleep_unless_woken(effect.seconds) if effect.heartbeat else asyncio.sleep(effect.seconds))
        elif isinstance(effect, Deliver):
            delivered = await self._deliver(effect.notice)
            self._poke()
            return delivered
        elif isinstance(effect, Joined):
            listener = self.listener
            if isinstance(listener, JoinListener):
                await self._call_listener("on_joined", lambda: listener.on_joined(effect.member_id, effect.generation,
                                                                                   effect.leader))
        elif isinstance(effect, AskLoad):
            return await self._ask_load()
        elif isinstance(effect, Offload):
            return self._offload(effect.job, self._wake_from_thread(asyncio.get_running_loop()))
        return None

    async def _answer_or_give_up(self, call: Awaitable[_Answer], seconds: float) -> _Answer:
        """Await a JoinGroup or SyncGroup; still unanswered after ``seconds``, the core gives the tasks up
        (``Member.give_up_unanswered``) and the call is still awaited: an answer that keeps us gives them back."""
        pending = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({pending}, timeout=seconds)
            if not done:
                for notice in self._member.give_up_unanswered():
                    await self._deliver(notice)
                    self._poke()
            return await pending
        finally:
            pending.cancel()  # a no-op once it is done; the client closing while it waits cancels the call

    async def _ask_load(self) -> pb.LoadReport | None:
        assert self._load_reporter is not None
        try:
            report = self._load_reporter(self)
            return await report if inspect.isawaitable(report) else report
        except Exception:
            log.exception("%s: load reporter failed", self.config.client_id)
            return None

    def _unwatch_loop(self) -> None:
        if self._probe_key is not None:
            probe_for(asyncio.get_running_loop(), self._monotonic).unwatch(self._probe_key)
            self._probe_key = None

    async def _sleep_unless_woken(self, seconds: float) -> None:
        wake = self._wake
        assert wake is not None
        if not wake.is_set():
            try:
                await asyncio.wait_for(wake.wait(), seconds)
            except TimeoutError:
                pass
        wake.clear()

    def _wake_from_thread(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Ends the heartbeat wait from another thread (an offloaded job done); a closed loop: nothing to wake."""
        def wake() -> None:
            if self._wake is not None:
                try:
                    loop.call_soon_threadsafe(self._wake.set)
                except RuntimeError:
                    pass
        return wake

    def _hear(self, nudge: Nudge) -> None:
        """News on the stream (on the loop): the core decides; the heartbeat wait ends now if it says so."""
        if self._member.hear(nudge) and self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------ listeners and streams

    def _listener_timeout(self) -> float:
        return self.config.rebalance_timeout_ms / 1000

    async def _deliver(self, notice: Notice) -> bool:
        deadline = self._monotonic() + self._listener_timeout()
        queues = [stream.offer(notice) for stream in list(self._streams)]
        ok = True
        if self.listener is not None:
            ok = await self._call_listener(notice.callback, lambda: notice.call(self.listener))
        for queue in queues:
            left = max(0.0, deadline - self._monotonic())
            try:
                await asyncio.wait_for(queue.join(), left)
            except TimeoutError:
                log.error("%s: a changes() loop did not finish with %s within the rebalance timeout (%.1fs)",
                          self.config.client_id, notice.kind, self._listener_timeout())
                ok = False
        return ok

    async def _call_listener(self, callback: str, call: Callable[[], object]) -> bool:
        """Call the listener and await what it returns, within the rebalance timeout. An exception is
        logged, never fatal; False when it was still running at the timeout (it is cancelled)."""
        try:
            result = call()
        except Exception:
            log.exception("%s: listener %s raised; carrying on", self.config.client_id, callback)
            return True
        if not inspect.isawaitable(result):
            return True
        task = asyncio.ensure_future(result)
        self._listener_task = task
        done, _ = await asyncio.wait({task}, timeout=self._listener_timeout())
        self._listener_task = None
        if not done:
            task.cancel()
            log.error("%s: listener %s did not return within the rebalance timeout (%.1fs): cancelled",
                      self.config.client_id, callback, self._listener_timeout())
            return False
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: listener %s raised; carrying on", self.config.client_id, callback,
                      exc_info=task.exception())
        return True

    def _end_streams(self) -> None:
        for stream in list(self._streams):
            stream.end()

    def _poke(self) -> None:
        """Wake ``wait_until`` callers (a new event for the next change)."""
        changed = self._changed
        if changed is not None:
            changed.set()
            self._changed = asyncio.Event()

    def _loop_was_late(self, late_s: float) -> None:
        lag = self.loop_lag
        lag.lost_s += late_s
        lag.worst_s = max(lag.worst_s, late_s)
        cfg = self.config
        if late_s * 1000 >= cfg.session_timeout_ms:
            lag.stalls += 1
            log.error("%s: the event loop was blocked for %.1fs, longer than the session timeout (%.1fs): the "
                      "coordinator may have expelled this member and given its tasks away", cfg.client_id, late_s,
                      cfg.session_timeout_ms / 1000)
        elif late_s * 1000 >= cfg.heartbeat_interval_ms:
            lag.stalls += 1
            log.warning("%s: the event loop was blocked for %.1fs: heartbeats were late (interval %.1fs, "
                        "session %.1fs)", cfg.client_id, late_s, cfg.heartbeat_interval_ms / 1000,
                        cfg.session_timeout_ms / 1000)
        self._poke()
