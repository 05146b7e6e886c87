"""A worker client's metrics, on the Prometheus registry of the service that embeds it.

``WorkerClient(..., metrics_registry=registry)`` adds the client to one collector per registry
(so several clients, e.g. of several groups, share one set of metric families), and nothing is
registered anywhere without it: the global default registry is never touched.

Read at scrape time from the client: its state, generation, owned task replicas, the coordinator
its group's requests go to and how many FindCoordinator rounds it asked. Counted
on the worker's diagram (``worker.states``): time spent rebalancing, i.e. running but not
Stable (PreparingJoin, Joining, Syncing), and rebalances finished (Stable reached again).
The running rebalance counts up to the scrape, so a worker stuck rebalancing shows.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from groupcoord.assignors.base import TaskReplica
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.states import WorkerState

__all__ = ["RebalanceTime", "WorkerCollector", "watch_worker"]

S = WorkerState


class Watched(Protocol):
    """What the collector reads of a client (``worker.client.WorkerClient``)."""

    config: WorkerConfig

    @property
    def state(self) -> WorkerState: ...

    @property
    def generation(self) -> int: ...

    @property
    def assigned_tasks(self) -> tuple[TaskReplica, ...]: ...

    @property
    def coordinator_address(self) -> str: ...

    @property
    def coordinator_lookups(self) -> int: ...

    @property
    def coordinator_via(self) -> str: ...


class RebalanceTime:
    """Time a worker spends running but not Stable, from its state changes (any thread)."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._since: float | None = None
        self._total = 0.0
        self.rebalances = 0

    def changed(self, before: WorkerState, after: WorkerState) -> None:
        """The worker moved from ``before`` to ``after`` (``WorkerMachine``'s ``on_change``)."""
        now = self._monotonic()
        with self._lock:
            if after in (S.PREPARING_JOIN, S.JOINING, S.SYNCING):
                if self._since is None:
                    self._since = now
                return
            if self._since is not None:
                self._total += now - self._since
                self._since = None
                if after is S.STABLE:
                    self.rebalances += 1

    def seconds(self) -> float:
        """Seconds spent rebalancing so far, the one under way included."""
        with self._lock:
            ongoing = 0.0 if self._since is None else self._monotonic() - self._since
            return self._total + ongoing


class WorkerCollector(Collector):
    """The metric families of every client watched on one registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (group, client id) -> the newest client so named, and its clock
        self._clients: dict[tuple[str, str], tuple[weakref.ref[Watched], RebalanceTime]] = {}

    def add(self, client: Watched, timer: RebalanceTime) -> None:
        key = (client.config.group_id, client.config.client_id)
        with self._lock:
            self._clients[key] = (weakref.ref(client), timer)

    def collect(self) -> Iterator[Metric]:
        labels = ["group", "client"]
        state = GaugeMetricFamily("groupcoord_worker_state", "1 for the worker's state on its diagram "
                                  "(Down, PreparingJoin, Joining, Syncing, Stable)", labels=[*labels, "state"])
        owned = GaugeMetricFamily("groupcoord_worker_owned_tasks", "Task replicas assigned to this worker",
                                  labels=labels)
        generation = GaugeMetricFamily("groupcoord_worker_generation", "The generation the worker last joined "
                                       "(-1 before its first)", labels=labels)
        seconds = CounterMetricFamily("groupcoord_worker_rebalance_seconds", "Time spent running but not Stable "
                                      "(PreparingJoin, Joining, Syncing), the current rebalance included",
                                      labels=labels)
        count = CounterMetricFamily("groupcoord_worker_rebalances", "Rebalances this worker finished (Stable "
                                    "reached again)", labels=labels)
        lookups = CounterMetricFamily("groupcoord_worker_coordinator_lookups", "FindCoordinator rounds this worker "
                                      "asked (at start, and each time its group's coordinator moved or failed)",
                                      labels=labels)
        coordinator = GaugeMetricFamily("groupcoord_worker_coordinator", "1 for the coordinator address this "
                                        "worker's group requests go to now", labels=[*labels, "address"])
        stream = GaugeMetricFamily("groupcoord_worker_session_stream", "1 when this worker's calls go on the "
                                   "process's Session stream to its coordinator now, 0 when they are unary calls",
                                   labels=labels)
        with self._lock:
            clients = list(self._clients.items())
        for key, (ref, timer) in clients:
            client = ref()
            if client is None:
                with self._lock:
                    if self._clients.get(key, (None,))[0] is ref:
                        del self._clients[key]
                continue
            ids = list(key)
            now = client.state
            for each in WorkerState:
                state.add_metric([*ids, each.value], 1 if each is now else 0)
            owned.add_metric(ids, len(client.assigned_tasks))
            generation.add_metric(ids, client.generation)
            seconds.add_metric(ids, timer.seconds())
            count.add_metric(ids, timer.rebalances)
            lookups.add_metric(ids, client.coordinator_lookups)
            coordinator.add_metric([*ids, client.coordinator_address], 1)
            stream.add_metric(ids, 1 if client.coordinator_via == "stream" else 0)
        yield from (state, owned, generation, seconds, count, lookups, coordinator, stream)


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, WorkerCollector] = weakref.WeakKeyDictionary()
_COLLECTORS_LOCK = threading.Lock()


def watch_worker(registry: CollectorRegistry, client: Watched, monotonic: Callable[[], float]) -> RebalanceTime:
    """Report ``client`` on ``registry`` (one collector per registry); returns the clock its state
    changes must be fed to. A newer client with the same group and client id replaces the older."""
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(registry)
        if collector is None:
            collector = _COLLECTORS[registry] = WorkerCollector()
            registry.register(collector)
    timer = RebalanceTime(monotonic)
    collector.add(client, timer)
    return timer
