"""The load statistics job's transforms: DataFrame -> DataFrame, native Spark functions only.

:func:`tag_rejects`, :func:`latest_workers`, :func:`coded_task_rows`, :func:`task_stats`,
:func:`snapshot_tasks`, :func:`split_candidates` and :func:`worker_stats` are pure: no I/O, no
session of their own, no Python UDFs (so executors need none of this project's code).
``loadstats.job`` reads the sample log, chains them and writes the snapshot.

Where the time goes (10 M samples, 2 cores): the shuffle and sort of the task rows. So the task
rows travel with integer codes instead of the group and worker strings, sorted first by a 64-bit
hash of the task (the sort's prefix comparison then settles almost every comparison), and the
reject and repeat counts are observed metrics of the passes that run anyway, not passes of
their own. Worker rows are few (one per report) and go through a small pass of their own first.

Time averages, in closed form
-----------------------------
Per task, the samples x_1..x_K in the sample order (``loadstats.reference``) go through Pulsar's
recurrence with cap N: ``n = min(k, N)``, ``avg_k = ((n-1)·avg_{k-1} + x_k)/n``. For k <= N this
is the running mean; for k > N it is ``avg_k = a·avg_{k-1} + x_k/N`` with ``a = 1 - 1/N``.
Unrolling gives the final value as a weighted sum ``avg_K = Σ_k w_k·x_k`` with

* K <= N:  ``w_k = 1/K``
* K >  N:  ``w_k = a^(K - max(k, N)) / N``  (the first N samples share the weight of avg_N)

Rows equal in every column (a retried report) count once. The job ranks each task's samples
with one window (``row_number`` for k, a full-frame ``count`` for K), computes the weights as
``exp(m·log1p(-1/N))/N`` in double (m = 0 exactly gives 1, which also covers N = 1), and sums
``w_k·x_k`` in a plain aggregation over the already-partitioned, already-sorted rows. No power
of a is ever formed by repeated multiplication, and weights below double range underflow to 0
harmlessly (they are < 1e-300 of the largest).

Like ``loadstats.job`` this module is the ``groupcoord[stats]`` extra's: it imports PySpark at
the top, and nothing the coordinator, worker or assignors import imports it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # pyspark's import-time notice about pandas 3
    from pyspark.sql import Column, DataFrame, Window
    from pyspark.sql import functions as F

from groupcoord.assignors.snapshot import TASK_STATS_FIELDS, WORKER_STATS_FIELDS
from groupcoord.figures import (
    LONG,
    RESOURCE_COLUMNS,
    RESOURCE_USAGE_COLUMNS,
    SHORT,
    TASK_COUNTS,
    TASK_RATES,
    averaged,
    samples_column,
)
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, TASK_SAMPLE_ORDER

__all__ = [
    "CORRUPT",
    "REJECT_REASONS",
    "TASK_COLUMNS",
    "WORKER_COLUMNS",
    "SplitThresholds",
    "coded_task_rows",
    "fresh_since",
    "latest_workers",
    "reject_metrics",
    "snapshot_tasks",
    "split_candidates",
    "tag_rejects",
    "task_stats",
    "worker_stats",
]

MIBI = 1024 * 1024
#: The column Spark's JSON reader fills with a line it cannot parse.
CORRUPT = "_corrupt_record"

#: Reject reasons, in the order they are tested (a row is counted under the first that applies).
REJECT_REASONS: tuple[str, ...] = (
    "malformed",  # a JSON line that does not parse
    "missing_key",  # ts_ms, group_id or worker_id null/empty, or task_id empty
    "missing_value",  # a figure of the row's kind (task or worker) is null
    "not_finite",  # NaN or +-inf in a figure
    "negative",  # a negative rate, throughput, count or usage (limits may be <= 0: unknown)
    "unknown_worker",  # a task row whose (group_id, worker_id) has no valid worker row
)

#: The snapshot's columns: ``group_id`` then the fields of ``assignors.snapshot``'s stats.
TASK_COLUMNS: tuple[str, ...] = ("group_id", *TASK_STATS_FIELDS)
WORKER_COLUMNS: tuple[str, ...] = ("group_id", *WORKER_STATS_FIELDS)


@dataclass(frozen=True, kw_only=True)
class SplitThresholds:
    """Split conditions (Pulsar's ``loadBalancerNamespaceBundle*`` defaults).

    A task with at least ``min_topics`` topics is a split candidate when its topics exceed
    ``max_topics``, or (``max_sessions`` > 0 and) producers + consumers exceed ``max_sessions``,
    or its long-term msg rate in + out (msg/s) exceeds ``max_msg_rate``, or its long-term
    throughput in + out (bytes/s) exceeds ``max_bandwidth_mbytes`` MiB/s.
    """

    max_topics: int = 1000
    max_sessions: int = 1000
    max_msg_rate: float = 30_000.0
    max_bandwidth_mbytes: float = 100.0
    min_topics: int = 2

    @property
    def max_bandwidth_bytes(self) -> float:
        return self.max_bandwidth_mbytes * MIBI


def _any(cols: Sequence[Column]) -> Column:
    out = cols[0]
    for c in cols[1:]:
        out = out | c
    return out


def tag_rejects(df: DataFrame, kind: str | None = None) -> DataFrame:
    """The sample columns plus ``_reject``: the first reason of :data:`REJECT_REASONS` that a row
    breaks on its own (all but ``unknown_worker``, which needs the worker rows), else null.

    ``df`` has the sample columns and optionally ``_corrupt_record``. ``kind="worker"`` or
    ``"task"`` keeps only the rows of that kind (``task_id`` null or not) and tests only their
    figures, so Parquet decodes and Spark evaluates only the columns that kind has.
    """
    if kind not in (None, "worker", "task"):
        raise ValueError(f"kind must be 'worker', 'task' or None, got {kind!r}")
    corrupt = F.col(CORRUPT) if CORRUPT in df.columns else F.lit(None).cast("string")
    is_task = F.col("task_id").isNotNull()
    if kind == "worker":
        df, is_task = df.where(~is_task), F.lit(False)
    elif kind == "task":
        df, is_task = df.where(is_task), F.lit(True)
    is_worker = ~is_task

    def empty(c: str) -> Column:
        return F.col(c).isNull() | (F.length(F.col(c)) == 0)

    def not_finite(c: str) -> Column:
        return F.isnan(F.col(c)) | (F.abs(F.col(c)) == float("inf"))

    task_doubles = list(TASK_RATES)
    task_all = task_doubles + list(TASK_COUNTS)
    checks: list[tuple[Column, str]] = [
        (corrupt.isNotNull(), "malformed"),
        (F.col("ts_ms").isNull() | empty("group_id") | empty("worker_id") | (F.length("task_id") == 0), "missing_key"),
    ]
    if kind != "worker":
        checks.append((is_task & _any([F.col(c).isNull() for c in task_all]), "missing_value"))
    if kind != "task":
        checks.append((is_worker & _any([F.col(c).isNull() for c in RESOURCE_COLUMNS]), "missing_value"))
    if kind != "worker":
        checks.append((is_task & _any([not_finite(c) for c in task_doubles]), "not_finite"))
    if kind != "task":
        checks.append((is_worker & _any([not_finite(c) for c in RESOURCE_COLUMNS]), "not_finite"))
    if kind != "worker":
        checks.append((is_task & _any([F.col(c) < 0 for c in task_all]), "negative"))
    if kind != "task":
        checks.append((is_worker & _any([F.col(c) < 0 for c in RESOURCE_USAGE_COLUMNS]), "negative"))
    reason = F.when(checks[0][0], F.lit(checks[0][1]))
    for condition, name in checks[1:]:
        reason = reason.when(condition, F.lit(name))
    columns = {
        None: SAMPLE_COLUMNS,
        "worker": tuple(c for c in SAMPLE_COLUMNS if c not in TASK_RATES + TASK_COUNTS),
        "task": tuple(c for c in SAMPLE_COLUMNS if c not in RESOURCE_COLUMNS),
    }[kind]
    return df.select(*columns, reason.alias("_reject"))


def reject_metrics() -> list[Column]:
    """Aggregates for ``DataFrame.observe`` on a tagged frame: rows read, and a count per reason."""

    return [
        F.count(F.lit(1)).alias("rows"),
        *(F.count(F.when(F.col("_reject") == F.lit(r), 1)).alias(r) for r in REJECT_REASONS),
    ]


def latest_workers(tagged: DataFrame) -> DataFrame:
    """Per ``(group_id, worker_id)`` with a valid worker row: that worker's latest valid row.

    The latest is the greatest by ``(ts_ms, resource values)``: ties broken by value. Besides
    ``ts_ms`` and the resource columns it carries two small integer codes for the task pass:
    ``_g`` numbers the groups and ``_w`` the workers in ``worker_id`` order, so the tasks' shuffle
    and sort carry integers, not strings, and the sample order's tie-break on ``worker_id`` holds.
    A task row whose ``(group_id, worker_id)`` is not here is an ``unknown_worker`` reject.
    """
    latest = (
        tagged.where(F.col("task_id").isNull() & F.col("_reject").isNull())
        .groupBy("group_id", "worker_id")
        .agg(F.max(F.struct("ts_ms", *RESOURCE_COLUMNS)).alias("_l"))
        .select("group_id", "worker_id", *(F.col(f"_l.{c}").alias(c) for c in ("ts_ms", *RESOURCE_COLUMNS)))
    )
    return latest.select(
        "*",
        F.dense_rank().over(Window.orderBy("group_id")).cast("int").alias("_g"),
        F.dense_rank().over(Window.orderBy("worker_id")).cast("int").alias("_w"),
    )


def _weight(k: Column, n_total: Column, cap: int) -> Column:
    """``w_k`` of the closed form for cap ``cap`` (see the module docstring)."""

    if cap < 1:
        raise ValueError(f"sample cap must be >= 1, got {cap}")
    log_a = math.log1p(-1.0 / cap) if cap > 1 else float("-inf")
    m = n_total - F.greatest(k, F.lit(cap))
    saturated = F.when(m == 0, F.lit(1.0 / cap)).otherwise(F.exp(m.cast("double") * F.lit(log_a)) / F.lit(cap))
    return F.when(n_total <= cap, F.lit(1.0) / n_total.cast("double")).otherwise(saturated)


TASK_KEY: tuple[str, ...] = ("_h", "_g", "task_id")
"""The task pass's key: a 64-bit hash of (group, task) first, so the sort compares longs and
almost never strings, then the exact identity (a hash collision cannot merge two tasks)."""


def coded_task_rows(tagged: DataFrame, workers: DataFrame) -> DataFrame:
    """Task rows with the integer codes of :func:`latest_workers`, ``unknown_worker`` tagged.

    Columns: ``_h, _g, task_id, _w, ts_ms``, the rates, the counts and ``_reject``.
    """
    codes = F.broadcast(workers.select("group_id", "worker_id", "_g", "_w"))
    rows = tagged.where(F.col("task_id").isNotNull()).join(codes, ["group_id", "worker_id"], "left")
    reject = F.coalesce(F.col("_reject"), F.when(F.col("_w").isNull(), F.lit("unknown_worker")))
    return rows.select(
        F.xxhash64("group_id", "task_id").alias("_h"),
        "_g",
        "task_id",
        "_w",
        "ts_ms",
        *TASK_RATES,
        *TASK_COUNTS,
        reject.alias("_reject"),
    )


_LOW_40 = (1 << 40) - 1


def _sort_hint() -> Column:
    """One long whose order is, nearly always, the window's order: the top 24 bits of ``_h``
    over the low 40 bits of ``ts_ms`` (34 years of milliseconds).

    Why: the window sorts by (task, time, ...), and Spark's sort settles a comparison on an
    8-byte prefix of the *first* key only, the task, so within a task every comparison reads
    both rows (a cache miss each). Sorted first by this single long (radix sort, no row reads),
    the rows reach the window's sort already in order, which its TimSort then checks in one
    sequential pass. It is only a hint: two tasks sharing the top 24 hash bits, equal
    timestamps or a wrap of the low bits merely leave work for the exact sort, never a wrong
    order. Measured: the task pass's reduce side 16.7 s -> 11.6 s on 10 M samples, 2 cores.
    """
    return F.col("_h").bitwiseAND(F.lit(~_LOW_40)).bitwiseOR(F.col("ts_ms").bitwiseAND(F.lit(_LOW_40)))


def task_stats(
    rows: DataFrame, short_samples: int = 10, long_samples: int = 1000, *, duplicates: Any = None
) -> DataFrame:
    """Per task (``_g, task_id``): short/long time averages, latest counts, reporter and time.

    ``rows``: valid coded task rows (:func:`coded_task_rows` without rejects). One shuffle and one
    exact sort (after the cheap :func:`_sort_hint` sort): the duplicate check (``lag`` over the sample order: a row equal in every column to the
    one before it is a repeat, e.g. a retried report, and counts once) and the ranking windows
    share the partitioning and the order, so Spark sorts once. ``duplicates``: an
    ``Observation`` that receives ``{"duplicates": n}``. Output: ``_g, task_id, _w`` (latest
    reporter), ``ts_ms`` (latest sample), the ``short_``/``long_`` columns and the counts.
    """
    order = tuple("_w" if c == "worker_id" else c for c in TASK_SAMPLE_ORDER)  # worker codes sort as ids do
    rows = rows.repartition(*TASK_KEY).sortWithinPartitions(_sort_hint())
    ordered = Window.partitionBy(*TASK_KEY).orderBy(*order)
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    repeat = F.lit(True)
    for c in order:
        repeat = repeat & F.lag(c).over(ordered).eqNullSafe(F.col(c))
    flagged = rows.select(*TASK_KEY, *order, repeat.alias("_dup"))
    if duplicates is not None:
        flagged = flagged.observe(duplicates, F.count(F.when(F.col("_dup"), 1)).alias("duplicates"))
    ranked = flagged.where(~F.col("_dup")).select(
        *TASK_KEY,
        *order,
        F.row_number().over(ordered).alias("_k"),
        F.count(F.lit(1)).over(whole).alias("_n"),
    )
    k, n = F.col("_k"), F.col("_n")
    ranked = ranked.select("*", _weight(k, n, short_samples).alias("_ws"), _weight(k, n, long_samples).alias("_wl"))
    return ranked.groupBy(*TASK_KEY).agg(
        F.max_by("_w", "_k").alias("_w"),
        F.max("ts_ms").alias("ts_ms"),
        F.least(F.max("_n"), F.lit(short_samples)).cast("long").alias(samples_column(SHORT)),
        *(F.sum(F.col(c) * F.col("_ws")).alias(a) for c, a in zip(TASK_RATES, averaged(SHORT), strict=True)),
        F.least(F.max("_n"), F.lit(long_samples)).cast("long").alias(samples_column(LONG)),
        *(F.sum(F.col(c) * F.col("_wl")).alias(a) for c, a in zip(TASK_RATES, averaged(LONG), strict=True)),
        *(F.max_by(c, "_k").cast("int").alias(c) for c in TASK_COUNTS),
    ).drop("_h")


def fresh_since(workers: DataFrame, max_sample_age_ms: int | None) -> DataFrame:
    """Per group ``_g``: the oldest latest-sample time that is still current (``_since``).

    A group's clock is its newest worker row (every report has one). A worker reports at least
    every ``load_report_update_max_interval``; one silent for longer than ``max_sample_age_ms``
    behind its group's newest report has gone, and so has a task nobody reported that long.
    ``None`` keeps everything.
    """
    newest = workers.groupBy("_g").agg(F.max("ts_ms").alias("_newest"))
    if max_sample_age_ms is None:
        return newest.select("_g", F.lit(None).cast("long").alias("_since"))
    return newest.select("_g", (F.col("_newest") - F.lit(max_sample_age_ms)).alias("_since"))


def snapshot_tasks(tasks: DataFrame, workers: DataFrame, since: DataFrame) -> DataFrame:
    """Named task rows: codes back to ``group_id``/``worker_id``, stale tasks dropped.

    ``tasks``: :func:`task_stats`; ``workers``: :func:`latest_workers`; ``since``:
    :func:`fresh_since`. The result has the snapshot's task columns except ``split_candidate``.
    """
    names = F.broadcast(workers.select("_g", "_w", "group_id", "worker_id"))
    joined = tasks.join(F.broadcast(since), ["_g"]).join(names, ["_g", "_w"])
    fresh = joined.where(F.col("_since").isNull() | (F.col("ts_ms") >= F.col("_since")))
    return fresh.select(*(c for c in TASK_COLUMNS if c != "split_candidate"))


def split_candidates(tasks: DataFrame, thresholds: SplitThresholds | None = None) -> DataFrame:
    """Add ``split_candidate`` (bool) to the output of :func:`snapshot_tasks` (see :class:`SplitThresholds`)."""

    t = thresholds or SplitThresholds()
    sessions = F.col("producers").cast("long") + F.col("consumers").cast("long")
    rate = F.col("long_msg_rate_in") + F.col("long_msg_rate_out")
    bandwidth = F.col("long_msg_throughput_in") + F.col("long_msg_throughput_out")
    over = (
        (F.col("topics") > F.lit(t.max_topics))
        | ((F.lit(t.max_sessions) > 0) & (sessions > F.lit(t.max_sessions)))
        | (rate > F.lit(float(t.max_msg_rate)))
        | (bandwidth > F.lit(float(t.max_bandwidth_bytes)))
    )
    flag = ((F.col("topics") >= F.lit(t.min_topics)) & over).alias("split_candidate")
    return tasks.select(*(c for c in TASK_COLUMNS if c != "split_candidate"), flag)


def worker_stats(workers: DataFrame, since: DataFrame, tasks: DataFrame) -> DataFrame:
    """Per current ``(group_id, worker_id)``: latest resource row, task count and long-term totals.

    ``workers``: :func:`latest_workers`; ``since``: :func:`fresh_since`; ``tasks``: the
    snapshot's task rows (a task belongs to its latest reporter, so ``num_tasks`` equals the
    number of task rows naming the worker).
    """
    current = workers.join(F.broadcast(since), ["_g"]).where(
        F.col("_since").isNull() | (F.col("ts_ms") >= F.col("_since"))
    )
    totals = tasks.groupBy("group_id", "worker_id").agg(
        F.count(F.lit(1)).alias("num_tasks"),
        *(F.sum(c).alias(c) for c in averaged(LONG)),
    )
    joined = current.join(totals, ["group_id", "worker_id"], "left")
    return joined.select(
        "group_id",
        "worker_id",
        *RESOURCE_COLUMNS,
        F.coalesce(F.col("num_tasks"), F.lit(0)).cast("long").alias("num_tasks"),
        *(F.coalesce(F.col(c), F.lit(0.0)).alias(c) for c in averaged(LONG)),
        F.col("ts_ms").cast("long").alias("ts_ms"),
    )
