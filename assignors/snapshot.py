"""The load snapshot: what the load statistics job produces and assignors read.

One definition, shared by the Spark job's reader (``loadstats``), the coordinator
(which relays it to the leader) and the load-aware assignors (``assignors.pulsar``
builds its Pulsar-style ``LoadData`` from it). Field names match the snapshot's
Parquet columns one for one (see docs/loadstats.md, "Snapshot schema"). Rates are msg/s,
throughputs bytes/s, resource usages in the unit the worker's probe reports
(cpu in percent of one core times cores, memory in MB, bandwidth in KB/s, as
Pulsar's ``LocalBrokerData``); a limit <= 0 means unknown. The figures and their units are
named once in ``groupcoord.figures``; :data:`TASK_STATS_FIELDS` and :data:`WORKER_STATS_FIELDS`
derive the column lists from them (the dataclasses spell their typed fields out, and a test
checks both lists against them and against the ``.proto``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from groupcoord.figures import LONG, RESOURCE_COLUMNS, TASK_COUNTS, TERMS, averaged, samples_column

__all__ = ["TASK_STATS_FIELDS", "WORKER_STATS_FIELDS", "LoadSnapshot", "TaskLoadStats", "WorkerLoadStats"]

#: The fields of :class:`TaskLoadStats` (= the snapshot's task columns after ``group_id``):
#: per term its sample count and averaged rates, then the latest counts.
TASK_STATS_FIELDS: Final[tuple[str, ...]] = (
    "task_id",
    "worker_id",
    *(c for term in TERMS for c in (samples_column(term), *averaged(term))),
    *TASK_COUNTS,
    "split_candidate",
)
#: The fields of :class:`WorkerLoadStats` (= the snapshot's worker columns after ``group_id``).
WORKER_STATS_FIELDS: Final[tuple[str, ...]] = ("worker_id", *RESOURCE_COLUMNS, "num_tasks", *averaged(LONG), "ts_ms")


@dataclass(frozen=True, slots=True)
class TaskLoadStats:
    """Short- and long-term time averages of one task's message load."""

    task_id: str
    worker_id: str = ""
    short_samples: int = 0
    short_msg_rate_in: float = 0.0
    short_msg_rate_out: float = 0.0
    short_msg_throughput_in: float = 0.0
    short_msg_throughput_out: float = 0.0
    long_samples: int = 0
    long_msg_rate_in: float = 0.0
    long_msg_rate_out: float = 0.0
    long_msg_throughput_in: float = 0.0
    long_msg_throughput_out: float = 0.0
    topics: int = 0
    producers: int = 0
    consumers: int = 0
    split_candidate: bool = False


@dataclass(frozen=True, slots=True)
class WorkerLoadStats:
    """Latest resource usage of one worker and the long-term totals of its tasks."""

    worker_id: str
    cpu_usage: float = 0.0
    cpu_limit: float = 0.0
    memory_usage: float = 0.0
    memory_limit: float = 0.0
    direct_memory_usage: float = 0.0
    direct_memory_limit: float = 0.0
    bandwidth_in_usage: float = 0.0
    bandwidth_in_limit: float = 0.0
    bandwidth_out_usage: float = 0.0
    bandwidth_out_limit: float = 0.0
    num_tasks: int = 0
    long_msg_rate_in: float = 0.0
    long_msg_rate_out: float = 0.0
    long_msg_throughput_in: float = 0.0
    long_msg_throughput_out: float = 0.0
    ts_ms: int = 0


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    """Load statistics of one group at one point in time.

    ``worker_id`` is the worker's member id (the id it reported load under), so
    an assignor finds a member's load with ``snapshot.workers.get(member_id)``.
    """

    group_id: str
    snapshot_id: str = ""
    created_ms: int = 0
    tasks: Mapping[str, TaskLoadStats] = field(default_factory=lambda: MappingProxyType({}))
    workers: Mapping[str, WorkerLoadStats] = field(default_factory=lambda: MappingProxyType({}))
