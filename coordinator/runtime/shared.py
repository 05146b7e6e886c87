"""What the runtimes of one process share: one clock, one loop-lag monitor, one pool of checker
threads, one metrics registry and one byte budget for large requests.

Built once (``ProcessParts.for_process``) and given to every shard's runtime at construction, so
the router reads them from one place and no runtime is changed after it is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from groupcoord.coordinator.clock import Clock, SystemClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.runtime.byte_budget import ByteBudget
from groupcoord.coordinator.runtime.checkers import CheckerPool
from groupcoord.coordinator.runtime.lag import LagMonitor, lag_monitor_for
from groupcoord.coordinator.runtime.metrics import CoordinatorMetrics

__all__ = ["ProcessParts", "WithProcessParts"]


@dataclass(frozen=True, kw_only=True)
class ProcessParts:
    """The parts of a coordinator process every shard's runtime uses."""

    config: CoordinatorConfig
    clock: Clock
    lag: LagMonitor
    checkers: CheckerPool  # request checks and answer completions too heavy for the event loop
    metrics: CoordinatorMetrics  # its own registry: ``metrics.registry``
    large_requests: ByteBudget  # bytes of large requests held at once (``coordinator.rpc.parsing``)

    @classmethod
    def for_process(cls, config: CoordinatorConfig | None = None, clock: Clock | None = None) -> ProcessParts:
        config = config or CoordinatorConfig()
        clock = clock or SystemClock()
        lag, metrics = lag_monitor_for(clock), CoordinatorMetrics()
        metrics.watch_loop_lag(lag.lost)
        return cls(config=config, clock=clock, lag=lag, checkers=CheckerPool(), metrics=metrics,
                   large_requests=ByteBudget(config.max_request_bytes_in_flight))


class WithProcessParts:
    """The process's parts read as attributes of their holder (a runtime, or the router of several)."""

    parts: ProcessParts

    @property
    def config(self) -> CoordinatorConfig:
        return self.parts.config

    @property
    def clock(self) -> Clock:
        return self.parts.clock

    @property
    def lag(self) -> LagMonitor:
        return self.parts.lag

    @property
    def checkers(self) -> CheckerPool:
        return self.parts.checkers

    @property
    def metrics(self) -> CoordinatorMetrics:
        return self.parts.metrics

    @property
    def large_requests(self) -> ByteBudget:
        return self.parts.large_requests
