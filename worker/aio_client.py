"""The worker client for asyncio services: the same member as ``WorkerClient``, on the service's loop.

A peer of the threaded client, not a wrapper: both walk the diagram of ``worker.states``, decide
on every failure by the table of ``worker.rules``, and keep their membership in a
``worker.session.Membership``; this module only does the I/O the asyncio way. One task on the
service's loop joins, syncs and heartbeats (no thread of its own), ``grpc.aio`` carries the calls.

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
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Self, TypeVar

from prometheus_client import CollectorRegistry

from groupcoord import errors
from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.registry import get_assignor
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import replicas_from_pb
from groupcoord.worker.aio_transport import AioChannelFactory, AsyncTransport
from groupcoord.worker.changes import ChangeStream
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.leader import AssignorLookup, Recheck, sync_request
from groupcoord.worker.listener import JoinListener
from groupcoord.worker.loop_lag import LoopLag, probe_for
from groupcoord.worker.metrics import watch_worker
from groupcoord.worker.ownership import Notice, Ownership
from groupcoord.worker.requests import heartbeat_request, join_request, leave_request, load_request
from groupcoord.worker.retry import async_join_retrying
from groupcoord.worker.rules import StableAction, rule_for
from groupcoord.worker.session import Membership
from groupcoord.worker.states import WorkerMachine, WorkerState
from groupcoord.worker.view import MemberView

__all__ = ["AssignmentChange", "AsyncWorkerClient"]

log = logging.getLogger("groupcoord.worker")

_Answer = TypeVar("_Answer")

AssignmentChange = Notice
"""What ``changes()`` yields: ``kind`` ("assigned", "revoked", "lost"), ``tasks``, ``generation``."""

AsyncLoadReporter = Callable[["AsyncWorkerClient"], "pb.LoadReport | None | Awaitable[pb.LoadReport | None]"]


class _Hung(errors.UnknownMemberIdError):
    """A listener hung past the rebalance timeout during a join: the member left; join again as a new one."""


class AsyncWorkerClient(MemberView):
    """Join ``config.group_id`` from a task on the running loop and keep ``listener`` told what to run.

    ``async with AsyncWorkerClient(config, listener) as client: ...`` (or ``await start()`` and
    ``await close()``). ``listener`` may be None when the service reads ``changes()`` instead.
    Cancelling the task that owns the ``async with`` closes the client: a dynamic member leaves,
    a static one keeps its instance for a restart within its session.
    """

    def __init__(
        self,
        config: WorkerConfig,
        listener: object | None = None,
        *,
        assignor_lookup: AssignorLookup = get_assignor,
        channel_factory: AioChannelFactory | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        load_reporter: AsyncLoadReporter | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.listener = listener
        self._assignor_lookup = assignor_lookup
        self._monotonic = monotonic
        self._load_reporter = load_reporter
        # the machine and the task list take a Condition (the threaded client waits on it); here only
        # this loop touches them, so it is never contended
        cond = threading.Condition()
        rebalance_time = None if metrics_registry is None else watch_worker(metrics_registry, self, monotonic)

        def changed(before: WorkerState, after: WorkerState) -> None:
            if rebalance_time is not None:
                rebalance_time.changed(before, after)
            self._poke()

        self._machine = WorkerMachine(cond, name=config.client_id, on_change=changed)
        self._transport = AsyncTransport(config.coordinators, channel_factory, name=config.client_id,
                                         reconnect_backoff_max_ms=min(500, config.heartbeat_interval_ms),
                                         security=config.security, group_id=config.group_id)
        self._session = Membership(config, monotonic)
        self._pending: list[Notice] = []
        self._tasks = Ownership(self._pending.append, cond, name=config.client_id)
        self._recheck = Recheck(assignor_lookup, monotonic, name=config.client_id)
        self._streams: weakref.WeakSet[ChangeStream] = weakref.WeakSet()
        self._changed: asyncio.Event | None = None
        self._wake: asyncio.Event | None = None
        self._rebalance_requested = False
        self._closing = False
        self._closed = False
        self._shut = False
        self._task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Future[Any] | None = None
        self._probe_key: int | None = None
        self._leave_on_close = not config.instance_id
        self.fatal_error: BaseException | None = None
        self.loop_lag = LoopLag()
        """How late the service's loop ran while this client was up (see ``worker.loop_lag``)."""

    # ------------------------------------------------------------------ public API (and MemberView's)

    @property
    def coordinator_address(self) -> str:
        """Where the group's requests go now (FindCoordinator's answer, or the next bootstrap address)."""
        return self._transport.address

    @property
    def coordinator_lookups(self) -> int:
        """FindCoordinator rounds this worker asked (a growing count says its coordinator keeps moving)."""
        return self._transport.lookups

    async def start(self) -> Self:
        """Start joining, on the running loop (returns at once; ``wait_until_stable`` waits)."""
        if self._task is not None:
            raise RuntimeError("an AsyncWorkerClient can be started once")
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._probe_key = probe_for(loop, self._monotonic).watch(self._loop_was_late)
        self._machine.fire("start")
        self._task = loop.create_task(self._run(), name=f"groupcoord-worker-{self.config.client_id}")
        return self

    async def close(self, *, leave_group: bool | None = None) -> None:
        """Stop tasks (listeners awaited), leave the group (LeaveGroup), stop the client's task.

        A static member (``instance_id``) does not leave by default: a restart within its session
        timeout then costs no rebalance. ``leave_group=True`` makes it leave (a scale-in),
        ``False`` keeps a dynamic member in the group until its session expires."""
        if leave_group is not None:
            self._leave_on_close = leave_group
        if self._closed:
            return
        self._closing = True
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
            if changed is None or remaining <= 0 or self.fatal_error is not None or self._closed:
                return predicate(self)
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass
        return True

    async def wait_until_stable(self, timeout: float = 30.0) -> bool:
        return await self.wait_until(lambda w: w.state is WorkerState.STABLE, timeout)

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (the worker re-joins at once)."""
        self._rebalance_requested = True
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

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        try:
            while not self._closing:
                if self.state is WorkerState.STABLE:
                    await self._stable_tick()
                else:
                    await self._join_and_sync_with_retry()
        except asyncio.CancelledError:
            if not self._closing:  # the loop is shutting down under us (e.g. asyncio.run ended): leave cleanly
                self._closing = True
                await self._shutdown()
            raise
        except Exception as failure:
            self.fatal_error = failure
            rule = rule_for(failure)
            if rule is None:
                log.exception("%s: worker loop failed", self.config.client_id)
            else:
                self._leave_on_close = self._leave_on_close and rule.leaves
                log.error("%s: stopping: %s", self.config.client_id, failure)
            await self._shutdown()

    async def _shutdown(self) -> None:
        """Revoke (or lose) the tasks, listeners awaited, leave if we should, and stop: once."""
        if self._shut:
            return
        self._shut = True
        try:
            running = self._listener_task  # a listener call close() cut short: let it finish (bounded)
            if running is not None and not running.done() and running is not asyncio.current_task():
                await asyncio.wait({running}, timeout=self._listener_timeout())
            rule = rule_for(self.fatal_error) if self.fatal_error is not None else None
            if rule is not None and rule.tasks_lost == "always":
                self._tasks.lose_all()
            else:
                self._tasks.revoke_all()
            await self._flush(leave_if_hung=False)
            await self._leave()
        finally:
            if self.state is not WorkerState.DOWN:
                self._machine.fire("stop")
            self._end_streams()
            self._unwatch_loop()

    def _unwatch_loop(self) -> None:
        if self._probe_key is not None:
            probe_for(asyncio.get_running_loop(), self._monotonic).unwatch(self._probe_key)
            self._probe_key = None

    async def _join_and_sync_with_retry(self) -> None:
        retrying = async_join_retrying(self.config, sleep=self._backoff, stopped=lambda: self._closing,
                                       where=lambda: self._transport.address)
        try:
            async for attempt in retrying:
                with attempt:
                    await self._join_and_sync()
        except errors.GroupCoordError as error:
            rule = rule_for(error)
            if self._closing and not (rule is not None and rule.fatal):
                return
            raise

    async def _backoff(self, seconds: float) -> None:
        """Sleep between join attempts; cooperative tasks are lost once a session passed unheard."""
        first = self._session.backoff_split(seconds, bool(self._tasks.assigned))
        if first is not None:
            await asyncio.sleep(first)
            await self._lose_if_session_over()
            seconds -= first
        await asyncio.sleep(seconds)

    async def _lose_if_session_over(self) -> None:
        if self._session.session_over(bool(self._tasks.assigned)) and not self._closing:
            log.warning("%s: no answer from the coordinator for a session timeout while re-joining: "
                        "tasks lost", self.config.client_id)
            self._tasks.lose_all()
            await self._flush()

    # ------------------------------------------------------------------ join / sync

    async def _join_and_sync(self) -> None:
        session = self._session
        if not session.cooperative():
            self._tasks.revoke_all()
            await self._flush()
        await self._lose_if_session_over()
        self._machine.fire("join")
        try:
            join = await self._join()
            if not session.cooperative():  # the group turned out eager
                self._tasks.revoke_all()
                if not await self._flush():
                    raise _Hung("left the group: a listener did not return within the rebalance timeout")
            self._machine.fire("joined")
            tasks = await self._sync(join)
        except Exception as failure:
            _, lose = session.join_failed(failure)
            if lose:
                self._tasks.lose_all()
            self._machine.fire("fail")
            await self._flush()
            raise
        await self._assign(tasks, join.generation)

    async def _join(self) -> pb.JoinGroupResponse:
        session = self._session
        sent = self._monotonic()
        try:
            response = await self._answer_or_give_up(self._transport.join_group(
                join_request(self.config, session.member_id, self._tasks), session.phase_timeout()), sent)
        except errors.MemberIdRequiredError as required:
            session.member_id = required.member_id
            log.info("%s: got member id %s", self.config.client_id, session.member_id)
            sent = self._monotonic()
            response = await self._answer_or_give_up(self._transport.join_group(
                join_request(self.config, session.member_id, self._tasks), session.phase_timeout()), sent)
        session.joined(response, sent)
        listener = self.listener
        if isinstance(listener, JoinListener):
            member, generation, leader = session.member_id, response.generation, session.is_leader
            await self._call_listener("on_joined", lambda: listener.on_joined(member, generation, leader))
        return response

    async def _sync(self, join: pb.JoinGroupResponse) -> tuple[TaskReplica, ...]:
        request = sync_request(self._assignor_lookup, self.config, self.member_id, self.is_leader, join)
        response = await self._answer_or_give_up(
            self._transport.sync_group(request, self._session.phase_timeout()), self._monotonic())
        self._session.synced(response)
        return replicas_from_pb(response.tasks)

    async def _answer_or_give_up(self, call: Awaitable[_Answer], sent: float) -> _Answer:
        """Await a JoinGroup or SyncGroup; cooperative tasks that run on meanwhile are lost once the
        coordinator could have removed us (``Membership.give_up_in``), not at the call's deadline, and
        the call is still awaited: an answer that keeps us gives them back (as the threaded client)."""
        seconds = self._session.give_up_in(sent, bool(self._tasks.assigned))
        if seconds is None:
            return await call
        pending = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, seconds))
            if not done and self._tasks.assigned and not self._closing:
                call_name = "JoinGroup" if self.state is WorkerState.JOINING else "SyncGroup"
                log.warning("%s: no answer to our %s by the time the coordinator could have removed us: tasks "
                            "lost (they come back if the answer keeps us)", self.config.client_id, call_name)
                self._tasks.lose_all()
                await self._flush()
            return await pending
        finally:
            pending.cancel()  # a no-op once it is done; the client closing while it waits cancels the call

    async def _assign(self, tasks: tuple[TaskReplica, ...], generation: int) -> None:
        self._recheck.reset()
        self._session.assigned()
        self._machine.fire("synced")
        revoked = self._tasks.apply(tasks, generation, cooperative=self._session.cooperative())
        if not await self._flush():
            self._rejoin()
        elif revoked or self._session.rejoin_after_sync:  # cooperative: the freed tasks move next generation
            log.info("%s: %d task(s) revoked in generation %d: re-joining at once", self.config.client_id,
                     len(revoked), generation)
            self._rejoin()

    def _rejoin(self) -> None:
        if self.state is WorkerState.STABLE:
            self._machine.fire("rejoin")

    # ------------------------------------------------------------------ stable

    async def _stable_tick(self) -> None:
        session = self._session
        await self._sleep_unless_woken(session.next_heartbeat_s())
        if self._closing:
            return
        if self._rebalance_requested:
            self._rebalance_requested = False
            self._machine.fire("rejoin")
            return
        request = heartbeat_request(self.config, session.member_id, session.generation)
        sent = self._monotonic()
        try:
            await self._transport.heartbeat(request, session.stable_timeout())
        except errors.GroupCoordError as error:
            verdict = session.heartbeat_failed(error)
            if verdict.action is StableAction.STOP:
                raise
            if verdict.lose_tasks:
                self._tasks.lose_all()
                await self._flush()
            if verdict.action is StableAction.REJOIN:
                self._rejoin()
            return
        session.heartbeat_ok(sent)
        await self._report_load()
        if self.is_leader and await self._load_recheck():
            self._rejoin()

    async def _sleep_unless_woken(self, seconds: float) -> None:
        wake = self._wake
        assert wake is not None
        if not wake.is_set():
            try:
                await asyncio.wait_for(wake.wait(), seconds)
            except TimeoutError:
                pass
        wake.clear()

    async def _load_recheck(self) -> bool:
        check = self._recheck.due(self.protocol)
        if check is None:
            return False
        request = pb.DescribeGroupRequest(group_id=self.config.group_id, include_load_snapshot=True)
        try:
            described = await self._transport.describe_group(request, self._session.stable_timeout())
        except errors.GroupCoordError as error:
            log.info("%s: load re-check skipped: %s", self.config.client_id, error)
            return False
        return self._recheck.judge(check, self.protocol, self.generation, described)

    async def _report_load(self) -> None:
        if self._load_reporter is None:
            return
        try:
            report = self._load_reporter(self)
            if inspect.isawaitable(report):
                report = await report
            if report is None:
                return
            request = load_request(self.config, self.member_id, self.generation, report)
            await self._transport.report_load(request, self._session.stable_timeout())
        except errors.GroupCoordError as error:
            log.info("%s: load report not sent: %s", self.config.client_id, error)
        except Exception:
            log.exception("%s: load reporter failed", self.config.client_id)

    # ------------------------------------------------------------------ listeners and streams

    def _listener_timeout(self) -> float:
        return self.config.rebalance_timeout_ms / 1000

    async def _flush(self, *, leave_if_hung: bool = True) -> bool:
        """Deliver the notices queued by the task list, in order, each awaited within the rebalance
        timeout. False when one hung: then the member has left the group (LeaveGroup) and must
        join again as a new member (its tasks are lost)."""
        ok = True
        while self._pending:
            notice = self._pending.pop(0)
            delivered = await self._deliver(notice)
            self._poke()
            if not delivered and ok:
                ok = False
                if leave_if_hung:
                    await self._leave_after_hang()
        return ok

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

    async def _leave_after_hang(self) -> None:
        """Leave the group now (static members too), so the tasks move without waiting for our session."""
        session = self._session
        if session.member_id:
            log.error("%s: leaving the group: a listener hung past the rebalance timeout", self.config.client_id)
            request = leave_request(self.config, session.member_id)
            await self._transport.leave_group(request, timeout=min(5.0, self.config.request_timeout_ms / 1000))
        session.reset(RuntimeError("a listener hung"))
        self._tasks.lose_all()

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

    async def _leave(self) -> None:
        session = self._session
        if not session.member_id or not self._leave_on_close:
            if session.member_id:
                log.info("%s: static member %s closes without leaving: its session timeout decides",
                         self.config.client_id, self.config.instance_id)
            return
        request = leave_request(self.config, session.member_id)
        if await self._transport.leave_group(request, timeout=min(5.0, self.config.request_timeout_ms / 1000)):
            log.info("%s: left group %s", self.config.client_id, self.config.group_id)
        session.member_id = ""
        session.generation = -1
