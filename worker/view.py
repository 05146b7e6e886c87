"""What a service reads of its worker client, and what both drivers set up alike (``WorkerClient``,
``AsyncWorkerClient``): state, membership and tasks read from the member core each one drives, the
core's construction with its metrics and wake-up, the transport's settings."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from groupcoord.assignors.base import TaskReplica
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.consumer_member import ConsumerMember
from groupcoord.worker.leader import AssignorLookup
from groupcoord.worker.member import Member
from groupcoord.worker.metrics import watch_worker
from groupcoord.worker.states import WorkerState

__all__ = ["MemberView", "transport_settings"]

log = logging.getLogger("groupcoord.worker")


class _Routed(Protocol):
    @property
    def address(self) -> str: ...
    @property
    def lookups(self) -> int: ...
    @property
    def via(self) -> str: ...


def transport_settings(config: WorkerConfig) -> dict[str, Any]:
    """Either transport's keyword settings for ``config``. It reconnects within a heartbeat interval of the
    coordinator's return (gRPC's default backoff grows to seconds during an outage, long enough to lose a
    session the outage itself would not)."""
    return {"name": config.client_id, "reconnect_backoff_max_ms": min(500, config.heartbeat_interval_ms),
            "security": config.security, "group_id": config.group_id, "session_stream": config.session_stream}


class MemberView:
    """Read-only properties over the member core (``_member``) the client drives and its transport."""

    config: WorkerConfig
    _member: Member | ConsumerMember
    _transport: _Routed

    def _make_member(self, config: WorkerConfig, *, assignor_lookup: AssignorLookup, monotonic: Callable[[], float],
                     metrics_registry: CollectorRegistry | None, wake: Callable[[], None],
                     on_tasks: Callable[[], None] | None = None, load_reports: bool = False) -> None:
        """The core this client drives, after ``_transport``; ``wake`` after every state change (and the
        metrics, only on a registry the service gives: state, rebalance time, tasks; see worker.metrics)."""
        rebalance_time = None if metrics_registry is None else watch_worker(metrics_registry, self, monotonic)

        def changed(before: WorkerState, after: WorkerState) -> None:
            if rebalance_time is not None:
                rebalance_time.changed(before, after)
            wake()

        transport = self._transport
        if config.protocol == "consumer":  # the coordinator assigns (or asks a leader) and re-checks the load
            self._member = ConsumerMember(config, monotonic=monotonic, on_change=changed, on_tasks=on_tasks,
                                          where=lambda: transport.address, assignor_lookup=assignor_lookup,
                                          load_reports=load_reports)
            return
        self._member = Member(config, assignor_lookup=assignor_lookup, monotonic=monotonic, on_change=changed,
                              on_tasks=on_tasks, where=lambda: transport.address, load_reports=load_reports)

    def _offload(self, job: Callable[[], Any], wake: Callable[[], None]) -> Future[Any]:
        """Carry out ``effects.Offload``: ``job`` (a leader's assignor run, off the heartbeats; the core runs
        one at a time) on a daemon thread, so an assignor that never returns holds neither a close nor
        the process's exit; ``wake`` (the heartbeat wait's end) once it is done."""
        future: Future[Any] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(job())
                except BaseException as failure:  # noqa: BLE001 - the core reads it from the future
                    future.set_exception(failure)
            wake()
        threading.Thread(target=run, name=f"groupcoord-assignor-{self.config.client_id}", daemon=True).start()
        return future

    @property
    def coordinator_address(self) -> str:
        """Where the group's requests go now (FindCoordinator's answer, or the next bootstrap address)."""
        return self._transport.address

    @property
    def coordinator_lookups(self) -> int:
        """FindCoordinator rounds this worker asked (a growing count says its coordinator keeps moving)."""
        return self._transport.lookups

    @property
    def coordinator_via(self) -> str:
        """"stream" when this member's calls go on the process's Session stream to its coordinator now,
        "unary" when they are unary calls (the coordinator has no stream, it is reconnecting, or it is off)."""
        return self._transport.via

    @property
    def fatal_error(self) -> BaseException | None:
        """The error that stopped the worker (a fatal row of ``worker.rules``, or a bug), else None."""
        return self._member.fatal_error

    @property
    def state(self) -> WorkerState:
        return self._member.machine.state

    def _stopped_by_error(self) -> bool:
        """A fatal error ended the member and its shutdown is over (tasks revoked or lost, DOWN): nothing
        changes any more. Until DOWN the shutdown is still moving, so a wait for DOWN itself is not cut short."""
        return self.fatal_error is not None and self.state is WorkerState.DOWN

    @property
    def member_id(self) -> str:
        return self._member.session.member_id

    @property
    def generation(self) -> int:
        return self._member.session.generation

    @property
    def leader_id(self) -> str:
        return self._member.session.leader_id

    @property
    def is_leader(self) -> bool:
        return self._member.session.is_leader

    @property
    def protocol(self) -> str:
        return self._member.session.protocol

    @property
    def assigned_tasks(self) -> tuple[TaskReplica, ...]:
        return self._member.tasks.assigned

    @property
    def rebalance_protocol(self) -> str:
        """How the current generation rebalances: a ``RebalanceProtocol`` ("eager", "cooperative"), or
        "consumer" in that protocol."""
        return self._member.session.rebalance_protocol
