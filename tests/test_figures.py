"""The load-figure vocabulary (``groupcoord.figures``) and everything that must agree with it.

Where a list of figures cannot be derived (a dataclass's typed fields, a ``.proto`` message,
Pulsar's mirror classes), this checks it against the vocabulary, name for name and in order.
"""

from __future__ import annotations

import dataclasses

import pytest

from groupcoord import figures
from groupcoord.assignors.pulsar.data import (
    LocalBrokerData,
    NamespaceBundleStats,
    TimeAverageBrokerData,
    TimeAverageMessageData,
)
from groupcoord.assignors.snapshot import TASK_STATS_FIELDS, WORKER_STATS_FIELDS, TaskLoadStats, WorkerLoadStats
from groupcoord.figures import RESOURCES, TASK_COUNTS, TASK_FIGURES, TASK_RATES, Resource, TaskCount, TaskRate
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, LoadReport, TaskLoad
from groupcoord.v1 import groupcoord_pb2 as pb


def names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def pb_names(message: type) -> tuple[str, ...]:
    return tuple(f.name for f in message.DESCRIPTOR.fields)  # type: ignore[attr-defined]


def test_every_figure_has_a_unit_and_a_meaning() -> None:
    for kind in (TaskRate, TaskCount, Resource):
        for figure in kind:
            assert figure.unit and figure.meaning, figure
            assert str(figure) == figure.value and f"{figure}" == figure.value
    assert TaskRate.MSG_THROUGHPUT_IN.unit == "bytes/s" and Resource.BANDWIDTH_OUT.unit == "KB/s"
    assert TASK_FIGURES == (
        "msg_rate_in", "msg_rate_out", "msg_throughput_in", "msg_throughput_out", "topics", "producers", "consumers",
    )
    assert RESOURCES == ("cpu", "memory", "direct_memory", "bandwidth_in", "bandwidth_out")
    assert figures.averaged(figures.SHORT)[0] == "short_msg_rate_in"
    assert figures.RESOURCE_COLUMNS[:2] == ("cpu_usage", "cpu_limit")


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        (names(TaskLoad), ("task_id", *TASK_FIGURES)),
        (pb_names(pb.TaskLoadReport), ("task_id", *TASK_FIGURES)),
        (names(LoadReport), ("ts_ms", *RESOURCES, "tasks")),
        (pb_names(pb.LoadReport), ("ts_ms", *RESOURCES, "tasks")),
        (names(TaskLoadStats), TASK_STATS_FIELDS),
        (pb_names(pb.TaskLoadStats), TASK_STATS_FIELDS),
        (names(WorkerLoadStats), WORKER_STATS_FIELDS),
        (pb_names(pb.WorkerLoadStats), WORKER_STATS_FIELDS),
        (SAMPLE_COLUMNS[4:], (*TASK_FIGURES, *figures.RESOURCE_COLUMNS)),
        (names(NamespaceBundleStats)[: len(TASK_RATES)], TASK_RATES),
        (names(TimeAverageMessageData)[2:], TASK_RATES),  # built positionally from rates_of()
        (names(LocalBrokerData)[: len(RESOURCES)], RESOURCES),
        (
            tuple(sorted(names(TimeAverageBrokerData))),
            tuple(sorted(f"{term}_term_{rate}" for term in figures.TERMS for rate in TASK_RATES)),
        ),
    ],
    ids=[
        "TaskLoad", "pb.TaskLoadReport", "LoadReport", "pb.LoadReport", "TaskLoadStats", "pb.TaskLoadStats",
        "WorkerLoadStats", "pb.WorkerLoadStats", "sample columns", "pulsar NamespaceBundleStats",
        "pulsar TimeAverageMessageData", "pulsar LocalBrokerData", "pulsar TimeAverageBrokerData",
    ],
)
def test_field_lists_follow_the_vocabulary(actual: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert actual == expected


def test_pulsar_counts_keep_their_own_names() -> None:
    """Pulsar calls producers/consumers ``producer_count``/``consumer_count``: the one rename."""
    assert names(NamespaceBundleStats)[len(TASK_RATES):] == ("topics", "producer_count", "consumer_count")
    assert TASK_COUNTS == ("topics", "producers", "consumers")
