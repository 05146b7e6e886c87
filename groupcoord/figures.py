"""The load figures, named once: what a worker reports and what the statistics job averages.

Three kinds, in Pulsar's units (``NamespaceBundleStats``, ``LocalBrokerData``):

* :class:`TaskRate`: a task's message rates. The job averages each over time, short term and
  long term (:data:`TERMS`), as Pulsar's ``TimeAverageMessageData``.
* :class:`TaskCount`: a task's counts. The snapshot keeps the latest sample's.
* :class:`Resource`: a worker's resources, each a ``(usage, limit)`` pair in the same unit; a
  limit <= 0 means unknown.

Why one module: the report, its protobuf, the sample rows and their Arrow and Spark schemas, the
snapshot's columns and the Pulsar load data all list these figures. Each of them iterates the
names here (in this order, the order of the wire's fields) instead of spelling them out, so a
new figure is added in one place and the places that cannot loop (a dataclass's typed fields, a
``.proto`` message) are checked against this list by the tests.

Ground layer: imports nothing of the project.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Self

__all__ = [
    # the figures
    "TaskRate",
    "TaskCount",
    "Resource",
    # their names as plain strings
    "TASK_RATES",
    "TASK_COUNTS",
    "TASK_FIGURES",
    "RESOURCES",
    "RESOURCE_COLUMNS",
    "RESOURCE_USAGE_COLUMNS",
    "usage_column",
    "limit_column",
    # time averages
    "SHORT",
    "LONG",
    "TERMS",
    "averaged",
    "samples_column",
]


class _Figure(StrEnum):
    """A figure: its name (the value, also the field and column name), unit and meaning."""

    unit: str
    meaning: str

    def __new__(cls, name: str, unit: str, meaning: str) -> Self:
        member = str.__new__(cls, name)
        member._value_ = name
        member.unit = unit
        member.meaning = meaning
        return member


class TaskRate(_Figure):
    """A task's message rates (doubles), time-averaged by the statistics job."""

    MSG_RATE_IN = ("msg_rate_in", "msg/s", "messages per second into the task")
    MSG_RATE_OUT = ("msg_rate_out", "msg/s", "messages per second out of the task")
    MSG_THROUGHPUT_IN = ("msg_throughput_in", "bytes/s", "bytes per second into the task")
    MSG_THROUGHPUT_OUT = ("msg_throughput_out", "bytes/s", "bytes per second out of the task")


class TaskCount(_Figure):
    """A task's counts (integers); the snapshot keeps the latest sample's."""

    TOPICS = ("topics", "count", "topics the task serves")
    PRODUCERS = ("producers", "count", "producer sessions (sessions = producers + consumers)")
    CONSUMERS = ("consumers", "count", "consumer sessions")


class Resource(_Figure):
    """A worker's resources, each reported as ``(usage, limit)`` in the unit given; limit <= 0: unknown."""

    CPU = ("cpu", "percent of one core", "CPU used; the limit is 100 x cores")
    MEMORY = ("memory", "MB", "memory used")
    DIRECT_MEMORY = ("direct_memory", "MB", "off-heap memory used; (0, 0) when the worker has none")
    BANDWIDTH_IN = ("bandwidth_in", "KB/s", "network bytes received")
    BANDWIDTH_OUT = ("bandwidth_out", "KB/s", "network bytes sent")


#: Names as plain ``str`` (for keyword arguments, dict keys, JSON and column names).
TASK_RATES: Final[tuple[str, ...]] = tuple(f.value for f in TaskRate)
TASK_COUNTS: Final[tuple[str, ...]] = tuple(f.value for f in TaskCount)
#: Every per-task figure: the fields of a task's report after ``task_id``.
TASK_FIGURES: Final[tuple[str, ...]] = TASK_RATES + TASK_COUNTS
RESOURCES: Final[tuple[str, ...]] = tuple(r.value for r in Resource)


def usage_column(resource: str) -> str:
    """``"cpu"`` -> ``"cpu_usage"``: the flat name of a resource's usage (samples, snapshot)."""
    return f"{resource}_usage"


def limit_column(resource: str) -> str:
    """``"cpu"`` -> ``"cpu_limit"``: the flat name of a resource's limit."""
    return f"{resource}_limit"


#: ``cpu_usage, cpu_limit, memory_usage, ...``: the resources flattened, usage before limit.
RESOURCE_COLUMNS: Final[tuple[str, ...]] = tuple(c for r in RESOURCES for c in (usage_column(r), limit_column(r)))
RESOURCE_USAGE_COLUMNS: Final[tuple[str, ...]] = tuple(usage_column(r) for r in RESOURCES)

#: The job's two time averages of each rate: over the last 10 samples and the last 1000
#: (Pulsar's ``NUM_SHORT_SAMPLES`` / ``NUM_LONG_SAMPLES``; the job takes the caps as options).
SHORT: Final = "short"
LONG: Final = "long"
TERMS: Final[tuple[str, ...]] = (SHORT, LONG)


def averaged(term: str) -> tuple[str, ...]:
    """The rates averaged over ``term``: ``averaged("long")`` -> ``("long_msg_rate_in", ...)``."""
    return tuple(f"{term}_{rate}" for rate in TASK_RATES)


def samples_column(term: str) -> str:
    """How many samples the ``term`` average covers (capped): ``"short_samples"``."""
    return f"{term}_samples"
