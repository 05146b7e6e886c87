"""The sample schema: the contract between load reporters and the statistics job.

A worker's :class:`LoadReport` (the in-process mirror of the proto ``LoadReport``) is
flattened by :func:`report_rows` into one *worker row* (``task_id`` is null; the ten
resource columns are set, the task columns are null) plus one *task row* per task
(``task_id`` set; the task columns are set, the resource columns are null).

=====================  =======  ===========================================================
column                 type     meaning
=====================  =======  ===========================================================
ts_ms                  int64    wall-clock time of the report, ms since the Unix epoch
group_id               string   the group
worker_id              string   the reporting worker (its member id)
task_id                string   null on the worker row
msg_rate_in/out        double   msg/s (task rows)
msg_throughput_in/out  double   bytes/s (task rows)
topics                 int32    task rows
producers, consumers   int32    sessions = producers + consumers (task rows)
cpu_usage/limit        double   percent of one core (limit = 100 x cores) (worker row)
memory_usage/limit     double   MB (worker row)
direct_memory_*        double   MB; (0, 0) when the worker has no such thing (worker row)
bandwidth_in/out_*     double   KB/s (worker row)
=====================  =======  ===========================================================

A limit <= 0 means "unknown". Units are Pulsar's ``LocalBrokerData`` ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import StructType

__all__ = [
    "KEY_COLUMNS",
    "RESOURCE_COLUMNS",
    "RESOURCE_USAGE_COLUMNS",
    "SAMPLE_ARROW_SCHEMA",
    "SAMPLE_COLUMNS",
    "TASK_COUNT_COLUMNS",
    "TASK_RATE_COLUMNS",
    "LoadReport",
    "ResourceUsage",
    "TaskLoad",
    "report_rows",
    "sample_spark_schema",
]

KEY_COLUMNS: tuple[str, ...] = ("ts_ms", "group_id", "worker_id", "task_id")
TASK_RATE_COLUMNS: tuple[str, ...] = ("msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out")
TASK_COUNT_COLUMNS: tuple[str, ...] = ("topics", "producers", "consumers")
_RESOURCES: tuple[str, ...] = ("cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out")
RESOURCE_COLUMNS: tuple[str, ...] = tuple(f"{r}_{part}" for r in _RESOURCES for part in ("usage", "limit"))
RESOURCE_USAGE_COLUMNS: tuple[str, ...] = tuple(f"{r}_usage" for r in _RESOURCES)
SAMPLE_COLUMNS: tuple[str, ...] = KEY_COLUMNS + TASK_RATE_COLUMNS + TASK_COUNT_COLUMNS + RESOURCE_COLUMNS

SAMPLE_ARROW_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("ts_ms", pa.int64()),
        pa.field("group_id", pa.string()),
        pa.field("worker_id", pa.string()),
        pa.field("task_id", pa.string()),
        *(pa.field(c, pa.float64()) for c in TASK_RATE_COLUMNS),
        *(pa.field(c, pa.int32()) for c in TASK_COUNT_COLUMNS),
        *(pa.field(c, pa.float64()) for c in RESOURCE_COLUMNS),
    ]
)


def sample_spark_schema() -> StructType:
    """The sample schema as a Spark ``StructType`` (imported lazily: the coordinator needs no Spark)."""
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    fields = [
        StructField("ts_ms", LongType()),
        StructField("group_id", StringType()),
        StructField("worker_id", StringType()),
        StructField("task_id", StringType()),
        *(StructField(c, DoubleType()) for c in TASK_RATE_COLUMNS),
        *(StructField(c, IntegerType()) for c in TASK_COUNT_COLUMNS),
        *(StructField(c, DoubleType()) for c in RESOURCE_COLUMNS),
    ]
    return StructType(fields)


class ResourceUsage(NamedTuple):
    """``(usage, limit)`` of one resource; ``limit <= 0`` means unknown."""

    usage: float = 0.0
    limit: float = 0.0

    @property
    def fraction(self) -> float | None:
        """``usage / limit`` or ``None`` when the limit is unknown."""
        return self.usage / self.limit if self.limit > 0 else None


#: ``(0, 0)``: no usage, unknown limit (the default of every resource of a report).
UNKNOWN_USAGE = ResourceUsage()


@dataclass(frozen=True, slots=True)
class TaskLoad:
    """One task's figures in one report (proto ``TaskLoadReport``). Rates msg/s, throughputs bytes/s."""

    task_id: str
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    topics: int = 0
    producers: int = 0
    consumers: int = 0


def _usage(value: Any) -> ResourceUsage:
    if isinstance(value, ResourceUsage):
        return value
    usage, limit = value
    return ResourceUsage(float(usage), float(limit))


@dataclass(frozen=True, slots=True)
class LoadReport:
    """One load report of one worker (proto ``LoadReport``; Pulsar's ``LocalBrokerData``, trimmed).

    Resource figures are :class:`ResourceUsage` ``(usage, limit)``; plain 2-tuples are accepted
    and converted. ``tasks`` is converted to a tuple.
    """

    ts_ms: int
    cpu: ResourceUsage = UNKNOWN_USAGE
    memory: ResourceUsage = UNKNOWN_USAGE
    direct_memory: ResourceUsage = UNKNOWN_USAGE
    bandwidth_in: ResourceUsage = UNKNOWN_USAGE
    bandwidth_out: ResourceUsage = UNKNOWN_USAGE
    tasks: tuple[TaskLoad, ...] = ()

    def __post_init__(self) -> None:
        for name in _RESOURCES:
            object.__setattr__(self, name, _usage(getattr(self, name)))
        object.__setattr__(self, "tasks", tuple(self.tasks))

    def resources(self) -> dict[str, ResourceUsage]:
        """``{"cpu": ResourceUsage, "memory": ..., ...}`` in the schema's order."""
        return {name: getattr(self, name) for name in _RESOURCES}

    @property
    def msg_rate_total(self) -> float:
        """Sum over tasks of msg rate in + out."""
        return math.fsum(t.msg_rate_in + t.msg_rate_out for t in self.tasks)

    @property
    def msg_throughput_total(self) -> float:
        """Sum over tasks of throughput in + out (bytes/s)."""
        return math.fsum(t.msg_throughput_in + t.msg_throughput_out for t in self.tasks)


def report_rows(group_id: str, worker_id: str, report: LoadReport) -> list[dict[str, Any]]:
    """Flatten one report into sample rows: the worker row first, then one row per task.

    Every row carries every column of :data:`SAMPLE_COLUMNS` (unused ones are ``None``), so
    the rows serialise to JSON Lines or build a ``pyarrow.Table`` with :data:`SAMPLE_ARROW_SCHEMA`.
    """
    ts_ms = int(report.ts_ms)
    worker_row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
    worker_row.update(ts_ms=ts_ms, group_id=group_id, worker_id=worker_id)
    for name, ru in report.resources().items():
        worker_row[f"{name}_usage"] = float(ru.usage)
        worker_row[f"{name}_limit"] = float(ru.limit)
    rows = [worker_row]
    for task in report.tasks:
        row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
        row.update(
            ts_ms=ts_ms,
            group_id=group_id,
            worker_id=worker_id,
            task_id=task.task_id,
            msg_rate_in=float(task.msg_rate_in),
            msg_rate_out=float(task.msg_rate_out),
            msg_throughput_in=float(task.msg_throughput_in),
            msg_throughput_out=float(task.msg_throughput_out),
            topics=int(task.topics),
            producers=int(task.producers),
            consumers=int(task.consumers),
        )
        rows.append(row)
    return rows


def rows_to_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Sample rows as a ``pyarrow.Table`` with :data:`SAMPLE_ARROW_SCHEMA`."""
    return pa.Table.from_pylist(list(rows), schema=SAMPLE_ARROW_SCHEMA)
