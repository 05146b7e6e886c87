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

A limit <= 0 means "unknown". Units are Pulsar's ``LocalBrokerData`` ones. The figures, their
order and units are named once in ``groupcoord.figures``; the columns and schemas here derive
from them.

Light: pyarrow and pyspark are imported only by the functions that build their schemas, so the
coordinator writes the log (JSON Lines) without them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from groupcoord.figures import RESOURCE_COLUMNS, RESOURCES, TASK_COUNTS, TASK_RATES, limit_column, usage_column

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "KEY_COLUMNS",
    "SAMPLE_COLUMNS",
    "TASK_SAMPLE_ORDER",
    "LoadReport",
    "ResourceUsage",
    "TaskLoad",
    "report_rows",
    "rows_to_table",
    "sample_arrow_schema",
    "sample_spark_schema",
]

KEY_COLUMNS: Final[tuple[str, ...]] = ("ts_ms", "group_id", "worker_id", "task_id")
#: Every column, in the schema's order: the keys, the task figures, the resources flattened.
SAMPLE_COLUMNS: Final[tuple[str, ...]] = KEY_COLUMNS + TASK_RATES + TASK_COUNTS + RESOURCE_COLUMNS
#: The order of one task's samples (shared by the job and ``loadstats.reference``): time,
#: reporter, then the figures. Rows equal in all of these are one sample reported twice.
TASK_SAMPLE_ORDER: Final[tuple[str, ...]] = ("ts_ms", "worker_id", *TASK_RATES, *TASK_COUNTS)


def sample_arrow_schema() -> pa.Schema:
    """The sample schema as a ``pyarrow.Schema`` (for Parquet sample files and tests)."""
    import pyarrow as pa  # lazy: optional heavy dependency (groupcoord[stats])

    return pa.schema(
        [
            pa.field("ts_ms", pa.int64()),
            pa.field("group_id", pa.string()),
            pa.field("worker_id", pa.string()),
            pa.field("task_id", pa.string()),
            *(pa.field(c, pa.float64()) for c in TASK_RATES),
            *(pa.field(c, pa.int32()) for c in TASK_COUNTS),
            *(pa.field(c, pa.float64()) for c in RESOURCE_COLUMNS),
        ]
    )


def sample_spark_schema() -> StructType:
    """The sample schema as a Spark ``StructType`` (what the job reads the log with)."""
    # lazy: optional heavy dependency (groupcoord[stats])
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    fields = [
        StructField("ts_ms", LongType()),
        StructField("group_id", StringType()),
        StructField("worker_id", StringType()),
        StructField("task_id", StringType()),
        *(StructField(c, DoubleType()) for c in TASK_RATES),
        *(StructField(c, IntegerType()) for c in TASK_COUNTS),
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
        for name in RESOURCES:
            object.__setattr__(self, name, _usage(getattr(self, name)))
        object.__setattr__(self, "tasks", tuple(self.tasks))

    def resources(self) -> dict[str, ResourceUsage]:
        """``{"cpu": ResourceUsage, "memory": ..., ...}`` in the schema's order."""
        return {name: getattr(self, name) for name in RESOURCES}

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
    the rows serialise to JSON Lines or build a ``pyarrow.Table`` (:func:`rows_to_table`).
    """
    ts_ms = int(report.ts_ms)
    worker_row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
    worker_row.update(ts_ms=ts_ms, group_id=group_id, worker_id=worker_id)
    for name, ru in report.resources().items():
        worker_row[usage_column(name)] = float(ru.usage)
        worker_row[limit_column(name)] = float(ru.limit)
    rows = [worker_row]
    for task in report.tasks:
        row: dict[str, Any] = dict.fromkeys(SAMPLE_COLUMNS)
        row.update(ts_ms=ts_ms, group_id=group_id, worker_id=worker_id, task_id=task.task_id)
        for rate in TASK_RATES:
            row[rate] = float(getattr(task, rate))
        for count in TASK_COUNTS:
            row[count] = int(getattr(task, count))
        rows.append(row)
    return rows


def rows_to_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Sample rows as a ``pyarrow.Table`` with :func:`sample_arrow_schema`."""
    import pyarrow as pa  # lazy: optional heavy dependency (groupcoord[stats])

    return pa.Table.from_pylist(list(rows), schema=sample_arrow_schema())
