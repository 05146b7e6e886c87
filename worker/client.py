"""The embeddable worker client: join a group, run what it is assigned, stay alive.

One background thread follows the seed's worker diagram::

    Down -> PreparingJoin -> Joining -> Syncing -> Stable
              ^  (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
              |   NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, timeouts)
              +------------------------------------------------------+

Heartbeats run only in Stable (the same thread does both, so they are off
while joining or syncing). Before re-joining the worker revokes (stops) its
tasks: the eager protocol. ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID reset the
member id and generation; NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE and
transport errors move to the next coordinator address (or the hinted one).
In Stable, losing the coordinator does not stop tasks until the session
timeout has passed without a successful heartbeat (a coordinator failover
keeps tasks running); calls in Stable give up after half the session, so a
hung coordinator is left in time to reach the new one. Retries back off
exponentially with jitter (tenacity).
"""

from __future__ import annotations

import logging
import threading
import time
from enum import Enum
from typing import Callable, Protocol, Sequence

import grpc
import tenacity

from assignors.base import Assignor, AssignorError, TaskReplica
from assignors.registry import get_assignor
from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.v1 import groupcoord_pb2_grpc as pb_grpc
from groupcoord.wire import context_from_describe, context_from_join, replicas_from_pb, sync_request_from_assignment
from worker.config import WorkerConfig

__all__ = ["WorkerClient", "WorkerState", "TaskListener", "WorkerClosedError"]

log = logging.getLogger("groupcoord.worker")


class WorkerState(Enum):
    DOWN = "Down"
    PREPARING_JOIN = "PreparingJoin"
    JOINING = "Joining"
    SYNCING = "Syncing"
    STABLE = "Stable"


class TaskListener(Protocol):
    """What the service is told. Called on the client's thread; exceptions are logged, not fatal.

    A listener may also define ``on_joined(member_id, generation, is_leader)``.
    """

    def on_assigned(self, tasks: Sequence[TaskReplica], generation: int) -> None: ...

    def on_revoked(self, tasks: Sequence[TaskReplica]) -> None: ...


class WorkerClosedError(RuntimeError):
    """The client was closed, or stopped on a fatal error (see ``fatal_error``)."""


_TRANSPORT_RETRIABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNIMPLEMENTED,
}


class WorkerClient:
    """Join ``config.group_id`` and keep ``listener`` told what this process must run.

    Use ``start()`` then ``close()`` (or a ``with`` block). ``generation`` and
    ``assigned_tasks`` let a service fence its own side effects: act on a task
    only while it is assigned in the current generation.
    """

    def __init__(
        self,
        config: WorkerConfig,
        listener: TaskListener,
        *,
        assignor_lookup: Callable[[str], Assignor] = get_assignor,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        load_reporter: Callable[["WorkerClient"], pb.LoadReport | None] | None = None,
    ) -> None:
        self.config = config
        self.listener = listener
        self._assignor_lookup = assignor_lookup
        self._channel_factory = channel_factory or (lambda address: grpc.insecure_channel(address))
        self._closing = threading.Event()
        self._sleep = sleep or (lambda seconds: self._closing.wait(seconds) and None)
        self._monotonic = monotonic
        self._load_reporter = load_reporter
        self._cond = threading.Condition()
        self._state = WorkerState.DOWN
        self._member_id = ""
        self._generation = -1
        self._leader_id = ""
        self._protocol = ""
        self._assigned: tuple[TaskReplica, ...] = ()  # what the service runs now
        self._owned: tuple[TaskReplica, ...] = ()  # last assignment received (reported for stickiness)
        self._owned_generation = -1
        self._address_index = 0
        self._address = config.coordinators[0]
        self._channel: grpc.Channel | None = None
        self._stub: pb_grpc.GroupCoordinatorStub | None = None
        self._inflight: grpc.Future | None = None
        self._last_heartbeat_ok = monotonic()
        self._rebalance_requested = False
        self._next_recheck: float | None = None
        self.fatal_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"groupcoord-worker-{config.client_id}", daemon=True)

    # ------------------------------------------------------------------ public API

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def leader_id(self) -> str:
        return self._leader_id

    @property
    def is_leader(self) -> bool:
        return bool(self._member_id) and self._member_id == self._leader_id

    @property
    def protocol(self) -> str:
        return self._protocol

    @property
    def assigned_tasks(self) -> tuple[TaskReplica, ...]:
        return self._assigned

    @property
    def coordinator_address(self) -> str:
        return self._address

    def start(self) -> "WorkerClient":
        self._set_state(WorkerState.PREPARING_JOIN)
        self._thread.start()
        return self

    def wait_until(self, predicate: Callable[["WorkerClient"], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds (checked at every state change) or the timeout passes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.fatal_error is not None:
                    return predicate(self)
                self._cond.wait(remaining)
        return True

    def wait_until_stable(self, timeout: float = 30.0) -> bool:
        return self.wait_until(lambda w: w.state is WorkerState.STABLE, timeout)

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (the worker re-joins at its next heartbeat tick)."""
        self._rebalance_requested = True
        with self._cond:
            self._cond.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Stop tasks, leave the group (LeaveGroup) and stop the thread."""
        self._closing.set()
        inflight = self._inflight
        if inflight is not None:
            inflight.cancel()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._channel is not None:
            self._channel.close()

    def __enter__(self) -> "WorkerClient":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                if self._state is WorkerState.STABLE:
                    self._stable_tick()
                else:
                    self._join_and_sync_with_retry()
        except WorkerClosedError:
            pass
        except errors.RequestError as fatal:
            self.fatal_error = fatal
            log.error("%s: stopping: %s", self.config.client_id, fatal)
        except Exception as bug:  # never die silently
            self.fatal_error = bug
            log.exception("%s: worker loop failed", self.config.client_id)
        finally:
            self._revoke()
            self._leave()
            self._set_state(WorkerState.DOWN)

    def _set_state(self, state: WorkerState) -> None:
        with self._cond:
            if state is not self._state:
                log.debug("%s: %s -> %s", self.config.client_id, self._state.value, state.value)
            self._state = state
            self._cond.notify_all()

    def _retrying(self) -> tenacity.Retrying:
        initial = self.config.retry_backoff_ms / 1000
        backoff = tenacity.wait_exponential_jitter(
            multiplier=initial, max=self.config.retry_backoff_max_ms / 1000, jitter=initial
        )

        def wait(retry_state: tenacity.RetryCallState) -> float:
            error = retry_state.outcome.exception() if retry_state.outcome else None
            if isinstance(error, (errors.RebalanceNeeded, errors.ResetNeeded, errors.MemberIdRequiredError)):
                return 0.0  # the coordinator told us exactly what to do next: do it now
            return float(backoff(retry_state))

        def before_sleep(retry_state: tenacity.RetryCallState) -> None:
            error = retry_state.outcome.exception() if retry_state.outcome else None
            if not isinstance(error, (errors.RebalanceNeeded, errors.ResetNeeded, errors.MemberIdRequiredError)):
                log.warning(
                    "%s: %s; retrying in %.2fs (attempt %d, coordinator %s)",
                    self.config.client_id, error, retry_state.upcoming_sleep, retry_state.attempt_number,
                    self._address,
                )

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda e: not isinstance(e, (errors.RequestError, WorkerClosedError))),
            wait=wait,
            stop=lambda retry_state: self._closing.is_set(),
            sleep=self._sleep,
            before_sleep=before_sleep,
            reraise=True,
        )

    def _join_and_sync_with_retry(self) -> None:
        try:
            for attempt in self._retrying():
                with attempt:
                    if self._closing.is_set():
                        raise WorkerClosedError("closing")
                    self._join_and_sync()
        except WorkerClosedError:
            return
        except errors.GroupCoordError as error:
            if self._closing.is_set() and not isinstance(error, errors.RequestError):
                return
            raise

    # ------------------------------------------------------------------ join / sync

    def _join_and_sync(self) -> None:
        self._set_state(WorkerState.PREPARING_JOIN)
        self._revoke()
        self._set_state(WorkerState.JOINING)
        try:
            response = self._join()
            self._set_state(WorkerState.SYNCING)
            tasks = self._sync(response)
        except errors.GroupCoordError as error:
            self._on_error(error)
            raise
        self._assign(tasks, response.generation)

    def _join_request(self) -> pb.JoinGroupRequest:
        cfg = self.config
        return pb.JoinGroupRequest(
            group_id=cfg.group_id,
            member_id=self._member_id,
            instance_id=cfg.instance_id,
            client_id=cfg.client_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.rebalance_timeout_ms,
            protocols=list(cfg.assignors),
            metadata=pb.MemberMetadata(
                rack=cfg.rack,
                pool=cfg.pool,
                capacity=cfg.capacity,
                attributes=dict(cfg.attributes),
                owned=[pb.TaskReplica(task_id=r.task_id, replica=r.replica) for r in self._owned],
                owned_generation=self._owned_generation,
            ),
        )

    def _join(self) -> pb.JoinGroupResponse:
        # Held by the coordinator until the join phase completes: allow the rebalance timeout.
        timeout = (self.config.rebalance_timeout_ms + self.config.request_timeout_ms) / 1000
        response = self._call("JoinGroup", self._join_request(), timeout)
        if response.error.code == pb.MEMBER_ID_REQUIRED:
            self._member_id = response.member_id
            log.info("%s: got member id %s", self.config.client_id, self._member_id)
            response = self._call("JoinGroup", self._join_request(), timeout)
        errors.raise_for(response.error, member_id=self._member_id)
        self._member_id = response.member_id
        self._generation = response.generation
        self._leader_id = response.leader_id
        self._protocol = response.protocol
        log.info(
            "%s: joined generation %d as %s (leader %s, assignor %s)",
            self.config.client_id, response.generation,
            "leader" if self.is_leader else "follower", response.leader_id, response.protocol,
        )
        if hasattr(self.listener, "on_joined"):
            self._notify("on_joined", self._member_id, response.generation, self.is_leader)
        return response

    def _sync(self, join: pb.JoinGroupResponse) -> tuple[TaskReplica, ...]:
        cfg = self.config
        if self.is_leader:
            request = self._assign_as_leader(join)
        else:
            request = pb.SyncGroupRequest(group_id=cfg.group_id, member_id=self._member_id, generation=join.generation)
        timeout = (self.config.rebalance_timeout_ms + self.config.request_timeout_ms) / 1000
        response = self._call("SyncGroup", request, timeout)
        errors.raise_for(response.error, member_id=self._member_id)
        return replicas_from_pb(response.tasks)

    def _assign_as_leader(self, join: pb.JoinGroupResponse) -> pb.SyncGroupRequest:
        cfg = self.config
        try:
            assignor = self._assignor_lookup(join.protocol)
            context = context_from_join(cfg.group_id, join)
            assignment = assignor.assign(context)
        except (AssignorError, LookupError, ValueError) as failure:
            log.error("%s: assignor %s failed: %s", cfg.client_id, join.protocol, failure)
            return pb.SyncGroupRequest(
                group_id=cfg.group_id, member_id=self._member_id, generation=join.generation,
                assignor_error=f"{type(failure).__name__}: {failure}",
            )
        return sync_request_from_assignment(cfg.group_id, self._member_id, join.generation, assignment)

    # ------------------------------------------------------------------ stable

    def _stable_tick(self) -> None:
        cfg = self.config
        self._sleep(cfg.heartbeat_interval_ms / 1000)
        if self._closing.is_set():
            return
        if self._rebalance_requested:
            self._rebalance_requested = False
            self._set_state(WorkerState.PREPARING_JOIN)
            return
        request = pb.HeartbeatRequest(
            group_id=cfg.group_id, member_id=self._member_id, generation=self._generation,
            instance_id=cfg.instance_id,
        )
        try:
            response = self._call("Heartbeat", request, self._stable_timeout())
            errors.raise_for(response.error, member_id=self._member_id)
            self._last_heartbeat_ok = self._monotonic()
            self._report_load()
            if self.is_leader:
                self._maybe_recheck()
        except errors.CoordinatorMovedError as moved:
            self._rediscover(moved.coordinator_hint)
            silent_for = self._monotonic() - self._last_heartbeat_ok
            if silent_for * 1000 >= cfg.session_timeout_ms:
                log.warning("%s: no heartbeat for %.1fs (> session timeout): re-joining", cfg.client_id, silent_for)
                self._set_state(WorkerState.PREPARING_JOIN)
            else:
                log.warning("%s: %s; keeping tasks, next heartbeat to %s", cfg.client_id, moved, self._address)
        except errors.GroupCoordError as error:
            log.info("%s: heartbeat: %s; re-joining", cfg.client_id, error)
            self._on_error(error)
            self._set_state(WorkerState.PREPARING_JOIN)

    def _stable_timeout(self) -> float:
        """Deadline (s) of a call in Stable: short enough to find a new coordinator within the session.

        A coordinator that hangs (SIGSTOPped, partitioned) would otherwise hold the heartbeat for the
        whole request timeout (30 s), long after the new active has expired our session. Like Kafka's
        consumer, which marks the coordinator unknown once a session passes without a heartbeat
        response, give up after half the session (a second address still gets the other half) and
        never past the session's end; at least one heartbeat interval so a slow answer can arrive.
        """
        cfg = self.config
        session = cfg.session_timeout_ms / 1000
        left = session - (self._monotonic() - self._last_heartbeat_ok)
        return max(cfg.heartbeat_interval_ms / 1000, min(cfg.request_timeout_ms / 1000, session / 2, left))

    def _maybe_recheck(self) -> None:
        """Leader only: an assignor with ``needs_rebalance(context)`` and ``recheck_interval_s``
        (the Pulsar shedders) is asked every interval, on the newest load snapshot, whether it
        would move something now; if so the leader re-joins, which rebalances the group."""
        try:
            assignor = self._assignor_lookup(self._protocol)
        except LookupError:
            return
        check = getattr(assignor, "needs_rebalance", None)
        interval = getattr(assignor, "recheck_interval_s", None)
        if check is None or not interval:
            return
        now = self._monotonic()
        if self._next_recheck is None:
            self._next_recheck = now + float(interval)
            return
        if now < self._next_recheck:
            return
        self._next_recheck = now + float(interval)
        try:
            assert self._channel is not None
            described = pb_grpc.GroupAdminStub(self._channel).DescribeGroup(
                pb.DescribeGroupRequest(group_id=self.config.group_id, include_load_snapshot=True),
                timeout=self._stable_timeout(),
            )
            if described.error.code != pb.NONE or described.generation != self._generation:
                return
            if check(context_from_describe(described)):
                log.info("%s: assignor %s would move tasks on the newest load snapshot: rebalancing",
                         self.config.client_id, self._protocol)
                self._set_state(WorkerState.PREPARING_JOIN)
        except grpc.RpcError as error:
            log.info("%s: load re-check skipped: %s", self.config.client_id, error)
        except Exception:
            log.exception("%s: assignor %s re-check failed", self.config.client_id, self._protocol)

    def _report_load(self) -> None:
        if self._load_reporter is None:
            return
        try:
            report = self._load_reporter(self)
            if report is None:
                return
            request = pb.ReportLoadRequest(
                group_id=self.config.group_id, member_id=self._member_id, generation=self._generation, report=report
            )
            response = self._call("ReportLoad", request, self._stable_timeout())
            if response.error.code != pb.NONE:
                log.info("%s: load report refused: %s", self.config.client_id, response.error.message)
        except WorkerClosedError:
            raise
        except errors.GroupCoordError as error:
            log.info("%s: load report not sent: %s", self.config.client_id, error)
        except Exception:
            log.exception("%s: load reporter failed", self.config.client_id)

    # ------------------------------------------------------------------ errors and transport

    def _on_error(self, error: errors.GroupCoordError) -> None:
        if isinstance(error, errors.ResetNeeded):
            log.info("%s: %s: resetting member id and generation", self.config.client_id, error)
            self._member_id = ""
            self._generation = -1
        elif isinstance(error, errors.CoordinatorMovedError):
            self._rediscover(error.coordinator_hint)

    def _rediscover(self, hint: str = "") -> None:
        addresses = self.config.coordinators
        if hint:
            address = hint
        else:
            if self._address in addresses:  # reached through a hint: go on from there, not back to it
                self._address_index = addresses.index(self._address)
            self._address_index = (self._address_index + 1) % len(addresses)
            address = addresses[self._address_index]
        if address != self._address or self._stub is None:
            log.info("%s: coordinator %s -> %s", self.config.client_id, self._address, address)
            self._address = address
            if self._channel is not None:
                self._channel.close()
            self._channel = None
            self._stub = None

    def _call(self, method: str, request: object, timeout: float) -> object:
        if self._stub is None:
            self._channel = self._channel_factory(self._address)
            self._stub = pb_grpc.GroupCoordinatorStub(self._channel)
        future = getattr(self._stub, method).future(request, timeout=timeout)
        self._inflight = future
        try:
            if self._closing.is_set():
                future.cancel()
            return future.result()
        except grpc.FutureCancelledError:
            raise WorkerClosedError("closed during a request") from None
        except grpc.RpcError as rpc_error:
            code = rpc_error.code() if hasattr(rpc_error, "code") else grpc.StatusCode.UNKNOWN
            if self._closing.is_set():
                raise WorkerClosedError("closed during a request") from rpc_error
            detail = rpc_error.details() if hasattr(rpc_error, "details") else str(rpc_error)
            if code in _TRANSPORT_RETRIABLE:
                raise errors.CoordinatorNotAvailableError(
                    f"{method} to {self._address} failed: {code.name} {detail}"
                ) from rpc_error
            raise errors.InvalidRequestError(f"{method} to {self._address}: {code.name} {detail}") from rpc_error
        finally:
            self._inflight = None

    # ------------------------------------------------------------------ listener

    def _assign(self, tasks: tuple[TaskReplica, ...], generation: int) -> None:
        self._next_recheck = None
        with self._cond:
            self._assigned = tasks
            self._owned = tasks
            self._owned_generation = generation
        self._last_heartbeat_ok = self._monotonic()
        self._set_state(WorkerState.STABLE)
        log.info(
            "%s: generation %d: assigned %s", self.config.client_id, generation,
            ", ".join(str(t) for t in tasks) or "nothing",
        )
        self._notify("on_assigned", tasks, generation)

    def _revoke(self) -> None:
        tasks = self._assigned
        if not tasks:
            return
        with self._cond:
            self._assigned = ()
            self._cond.notify_all()
        self._notify("on_revoked", tasks)

    def _notify(self, callback: str, *args: object) -> None:
        try:
            getattr(self.listener, callback)(*args)
        except Exception:
            log.exception("%s: listener %s raised; carrying on", self.config.client_id, callback)

    def _leave(self) -> None:
        if not self._member_id:
            return
        request = pb.LeaveGroupRequest(
            group_id=self.config.group_id, member_id=self._member_id, instance_id=self.config.instance_id
        )
        try:
            if self._stub is None:
                self._channel = self._channel_factory(self._address)
                self._stub = pb_grpc.GroupCoordinatorStub(self._channel)
            response = self._stub.LeaveGroup(request, timeout=min(5.0, self.config.request_timeout_ms / 1000))
            if response.error.code == pb.NONE:
                log.info("%s: left group %s", self.config.client_id, self.config.group_id)
            else:
                log.info("%s: leave: %s", self.config.client_id, response.error.message)
        except grpc.RpcError as error:
            log.info("%s: could not send LeaveGroup: %s", self.config.client_id, error)
        self._member_id = ""
        self._generation = -1
