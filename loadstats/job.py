"""The load statistics job: sample log in, load snapshot out (PySpark).

Thin job, pure transforms (:func:`tag_rejects`, :func:`latest_workers`, :func:`coded_task_rows`,
:func:`task_stats`, :func:`snapshot_tasks`, :func:`split_candidates`, :func:`worker_stats`):
DataFrame -> DataFrame functions using native Spark functions only. :func:`run` does the I/O.

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

Rows equal in every column (a retried report) count once. The job ranks each task's samples with one window (``row_number`` for k, a full-frame ``count``
for K), computes the weights as ``exp(m·log1p(-1/N))/N`` in double (m = 0 exactly gives 1, which
also covers N = 1), and sums ``w_k·x_k`` in a plain aggregation over the already-partitioned,
already-sorted rows. No power of a is ever formed by repeated multiplication, and weights below
double range underflow to 0 harmlessly (they are < 1e-300 of the largest).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

if __name__ == "__main__" and __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with warnings.catch_warnings():
    # pyspark's import-time notice about pandas 3 (the job does not use pandas). This module is
    # the Spark job: it needs the groupcoord[stats] extra, so it imports PySpark at the top;
    # nothing the coordinator, worker or assignors import imports it.
    warnings.simplefilter("ignore", FutureWarning)
    from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

from assignors.snapshot import TASK_STATS_FIELDS, WORKER_STATS_FIELDS
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
from loadstats.samples import SAMPLE_COLUMNS, TASK_SAMPLE_ORDER, sample_spark_schema

__all__ = [
    "REJECT_REASONS",
    "TASK_COLUMNS",
    "WORKER_COLUMNS",
    "JobResult",
    "SplitThresholds",
    "coded_task_rows",
    "latest_workers",
    "main",
    "read_samples",
    "run",
    "snapshot_tasks",
    "split_candidates",
    "tag_rejects",
    "task_stats",
    "worker_stats",
]

log = logging.getLogger(__name__)

MIBI = 1024 * 1024
CORRUPT = "_corrupt_record"
_STAGE = "stage-latest-workers"  # inside the snapshot's temp dir, removed before the swap (no leading
# "_" or ".": Spark would call the path hidden and warn)
#: Two of ``load_report_update_max_interval`` (15 min): a live worker has reported by then.
DEFAULT_MAX_SAMPLE_AGE_S = 1800.0

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


@dataclass(frozen=True)
class JobResult:
    """What one run did. ``rows_rejected`` maps each reason of :data:`REJECT_REASONS` to a count."""

    samples_path: str
    out_path: str
    snapshot_id: str
    created_ms: int
    rows_read: int
    rows_rejected: Mapping[str, int]
    tasks: int
    workers: int
    groups: int
    split_candidates: int
    wall_time_s: float
    rows_duplicate: int = 0
    snapshot_dir: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rows_good(self) -> int:
        return self.rows_read - sum(self.rows_rejected.values())


# --------------------------------------------------------------------------------------------
# Reading


def read_samples(spark: SparkSession, samples_path: str) -> DataFrame:
    """All Parquet (``*.parquet``) and JSON Lines (``*.jsonl``, ``*.json``) files under a tree.

    Files whose names start with ``.`` or ``_`` are ignored by Spark (the sample log's in-progress
    files). Columns follow the sample schema plus ``_corrupt_record`` (non-null for a JSON line
    that does not parse).
    """
    schema = sample_spark_schema()
    json_schema = StructType([*schema.fields, StructField(CORRUPT, StringType())])
    reader = spark.read.option("recursiveFileLookup", "true")
    parquet = reader.schema(schema).option("pathGlobFilter", "*.parquet").parquet(samples_path)
    jsonl = (
        spark.read.option("recursiveFileLookup", "true")
        .schema(json_schema)
        .option("pathGlobFilter", "*.{jsonl,json}")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(samples_path)
    )
    parquet = parquet.select(*SAMPLE_COLUMNS, F.lit(None).cast("string").alias(CORRUPT))
    return parquet.unionByName(jsonl.select(*SAMPLE_COLUMNS, CORRUPT))


# --------------------------------------------------------------------------------------------
# Transforms


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


def _fresh_since(workers: DataFrame, max_sample_age_ms: int | None) -> DataFrame:
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
    :func:`_fresh_since`. The result has the snapshot's task columns except ``split_candidate``.
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

    ``workers``: :func:`latest_workers`; ``since``: :func:`_fresh_since`; ``tasks``: the
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


# --------------------------------------------------------------------------------------------
# Running


def _is_local_path(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local(path: str) -> str:
    return path.removeprefix("file://")


def build_session(
    master: str | None = "local[*]",
    *,
    app_name: str = "groupcoord-loadstats",
    driver_memory: str | None = "4g",
    shuffle_partitions: int | None = None,
    extra_conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """Get or create a SparkSession for the job.

    ``master=None`` leaves the master to the environment (``spark-submit --master``, or
    ``spark.master`` in spark-defaults); without any, Spark's default applies. Driver memory only
    takes effect when this call starts the JVM.
    """
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if driver_memory and "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.config("spark.driver.memory", driver_memory)
    cores = os.cpu_count() or 2
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(4, 4 * cores)))
        .config("spark.ui.showConsoleProgress", "false")
        # the job reports what matters itself (rows, rejects, errors); Spark's WARN lines, e.g. on the
        # deliberately single-partition window over the one-row-per-worker table, only bury it
        .config("spark.log.level", log_level)
    )
    if master is not None and master.startswith("local"):
        # one machine: shuffle files stay in the page cache, so compressing them only costs CPU
        # (measured: the 10 M sample job ran ~20% faster without it on 2 cores)
        builder = builder.config("spark.shuffle.compress", "false")
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return builder.getOrCreate()


def _swap_into_place(tmp_dir: str, out_path: str, snapshot_id: str, keep: int = 2) -> str:
    """Make ``out_path`` point at the finished ``tmp_dir`` atomically; return the version dir.

    Layout: ``OUT`` is a symlink to ``.OUT.versions/<snapshot_id>`` beside it; the link is
    replaced with ``os.replace`` (atomic on POSIX), so a reader sees the old snapshot or the new
    one, never half. The ``keep`` newest versions stay (a reader that resolved the old link keeps
    reading a complete snapshot). A pre-existing real directory at OUT is moved into the versions
    directory first (one-off, not atomic).
    """
    out_path = os.path.abspath(out_path)
    parent, name = os.path.split(out_path)
    versions = os.path.join(parent, f".{name}.versions")
    os.makedirs(versions, exist_ok=True)
    final = os.path.join(versions, snapshot_id)
    os.replace(tmp_dir, final)
    if os.path.isdir(out_path) and not os.path.islink(out_path):
        os.replace(out_path, os.path.join(versions, f"legacy-{uuid.uuid4().hex[:8]}"))
    link_tmp = os.path.join(parent, f".{name}.link-{uuid.uuid4().hex[:8]}")
    os.symlink(os.path.relpath(final, parent), link_tmp)
    os.replace(link_tmp, out_path)
    # prune old versions (by name: snapshot ids start with a zero-padded created_ms)
    entries = sorted(e for e in os.listdir(versions) if not e.startswith("."))
    current = os.path.basename(final)
    old = [e for e in entries if e != current]
    for e in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(os.path.join(versions, e), ignore_errors=True)
    return final


def _observed(observation: Any) -> dict[str, Any]:
    """An observation's metrics; empty when its pass saw no input (Spark then has no row to give)."""
    try:
        return dict(observation.get)
    except Exception:  # noqa: BLE001 - py4j's error for "no metrics row"; checked by the caller
        return {}


def run(
    samples_path: str,
    out_path: str,
    *,
    master: str | None = "local[*]",
    short_samples: int = 10,
    long_samples: int = 1000,
    max_sample_age_s: float | None = DEFAULT_MAX_SAMPLE_AGE_S,
    spark: SparkSession | None = None,
    thresholds: SplitThresholds | None = None,
    driver_memory: str | None = "4g",
) -> JobResult:
    """Read the sample log under ``samples_path``, write a snapshot at ``out_path``.

    ``OUT/tasks/`` and ``OUT/workers/`` (Parquet) and ``OUT/_meta.json`` appear together (see
    :func:`_swap_into_place`). ``out_path`` must be a local or mounted path; ``samples_path`` is
    any path Spark reads. With ``spark=None`` a session is created (``master=None``: leave the
    master to spark-submit) and stopped at the end; a given session is left running.
    ``max_sample_age_s``: workers and tasks whose latest sample is older than this behind their
    group's newest report are left out (``None`` or 0 keeps everything).
    Raises ``FileNotFoundError`` when a local ``samples_path`` does not exist and ``ValueError``
    on bad caps.

    Passes over the log: one over the worker rows (1 in ``1 + tasks per report``), one over the
    task rows with one shuffle; reject and repeat counts ride along as observed metrics.
    """
    if short_samples < 1 or long_samples < 1:
        raise ValueError(f"sample caps must be >= 1 (short={short_samples}, long={long_samples})")
    if max_sample_age_s is not None and max_sample_age_s < 0:
        raise ValueError(f"max_sample_age_s must be >= 0, got {max_sample_age_s}")
    if _is_local_path(samples_path) and not os.path.exists(_local(samples_path)):
        raise FileNotFoundError(f"samples path {samples_path!r} does not exist")
    if not _is_local_path(out_path):
        raise ValueError(f"out_path must be a local or mounted path, got {out_path!r}")
    out_path = os.path.abspath(_local(out_path))
    max_age_ms = int(max_sample_age_s * 1000) if max_sample_age_s else None
    started = time.monotonic()
    own_session = spark is None
    session = spark if spark is not None else build_session(master, driver_memory=driver_memory)
    try:
        created_ms = time.time_ns() // 1_000_000
        snapshot_id = f"{created_ms:015d}-{uuid.uuid4().hex[:8]}"
        parent, name = os.path.split(out_path)
        os.makedirs(parent or ".", exist_ok=True)
        tmp_dir = os.path.join(parent, f".{name}.tmp-{snapshot_id}")

        def parquet_path(part: str) -> str:
            return "file://" + os.path.join(tmp_dir, part)

        try:
            samples = read_samples(session, samples_path)
            worker_rows_seen, task_rows_seen, repeats = Observation(), Observation(), Observation()
            # pass 1: the worker rows -> latest row per worker (small; staged, then re-read)
            worker_rows = tag_rejects(samples, "worker").observe(worker_rows_seen, *reject_metrics())
            latest_workers(worker_rows).write.mode("overwrite").parquet(parquet_path(_STAGE))
            workers = session.read.parquet(parquet_path(_STAGE))
            since = _fresh_since(workers, max_age_ms)
            # pass 2: the task rows -> averages (one shuffle)
            coded = coded_task_rows(tag_rejects(samples, "task"), workers).observe(task_rows_seen, *reject_metrics())
            good = coded.where(F.col("_reject").isNull()).drop("_reject")
            stats = task_stats(good, short_samples, long_samples, duplicates=repeats)
            tasks = split_candidates(snapshot_tasks(stats, workers, since), thresholds)
            tasks.repartition(1).sortWithinPartitions("group_id", "task_id").write.mode("overwrite").parquet(
                parquet_path("tasks")
            )
            written = session.read.parquet(parquet_path("tasks"))
            (
                worker_stats(workers, since, written)
                .repartition(1)
                .sortWithinPartitions("group_id", "worker_id")
                .write.mode("overwrite")
                .parquet(parquet_path("workers"))
            )
            seen = [_observed(worker_rows_seen), _observed(task_rows_seen)]
            rows_read = sum(int(s.get("rows", 0)) for s in seen)
            rejected = {r: sum(int(s.get(r, 0)) for s in seen) for r in REJECT_REASONS}
            duplicates = int(_observed(repeats).get("duplicates", 0))
            summary = written.agg(
                F.count(F.lit(1)).alias("tasks"),
                F.count(F.when(F.col("split_candidate"), 1)).alias("splits"),
            ).collect()[0]
            wsum = (
                session.read.parquet(parquet_path("workers"))
                .agg(F.count(F.lit(1)).alias("workers"), F.countDistinct("group_id").alias("groups"))
                .collect()[0]
            )
            shutil.rmtree(os.path.join(tmp_dir, _STAGE))
            if rows_read == 0 and (summary["tasks"] or wsum["workers"]):
                raise RuntimeError("the job's row counts went missing (Spark reported no observed metrics)")
            meta: dict[str, Any] = {
                "format_version": 1,
                "snapshot_id": snapshot_id,
                "created_ms": created_ms,
                "samples_path": samples_path,
                "short_samples_max": short_samples,
                "long_samples_max": long_samples,
                "max_sample_age_s": max_sample_age_s or None,
                "split_thresholds": {
                    k: getattr(thresholds or SplitThresholds(), k)
                    for k in ("max_topics", "max_sessions", "max_msg_rate", "max_bandwidth_mbytes", "min_topics")
                },
                "rows_read": rows_read,
                "rows_rejected": rejected,
                "rows_duplicate": duplicates,
                "tasks": int(summary["tasks"]),
                "workers": int(wsum["workers"]),
                "split_candidates": int(summary["splits"]),
            }
            with open(os.path.join(tmp_dir, "_meta.json"), "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            final = _swap_into_place(tmp_dir, out_path, snapshot_id)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        result = JobResult(
            samples_path=samples_path,
            out_path=out_path,
            snapshot_id=snapshot_id,
            created_ms=created_ms,
            rows_read=rows_read,
            rows_rejected=rejected,
            rows_duplicate=duplicates,
            tasks=meta["tasks"],
            workers=meta["workers"],
            groups=int(wsum["groups"]),
            split_candidates=meta["split_candidates"],
            wall_time_s=time.monotonic() - started,
            snapshot_dir=final,
        )
        log.info("load snapshot %s written to %s: %s", snapshot_id, out_path, result)
        return result
    finally:
        if own_session:
            session.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit loadstats/job.py --samples P --out O`` (or ``python -m loadstats.job``)."""
    parser = argparse.ArgumentParser(prog="loadstats.job", description="Build a load snapshot from the sample log.")
    parser.add_argument("--samples", required=True, help="sample log directory (any path Spark reads)")
    parser.add_argument("--out", required=True, help="snapshot directory (local or mounted path)")
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    parser.add_argument("--short-samples", type=int, default=10)
    parser.add_argument("--long-samples", type=int, default=1000)
    parser.add_argument(
        "--max-sample-age-s", type=float, default=DEFAULT_MAX_SAMPLE_AGE_S,
        help="leave out workers and tasks silent this long behind their group's newest report (0: keep all)",
    )
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args(argv)
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    # stdout carries only the JSON summary (scripts parse it); logs go to stderr
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr, force=True
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        result = run(
            args.samples,
            args.out,
            master=master,
            short_samples=args.short_samples,
            long_samples=args.long_samples,
            max_sample_age_s=args.max_sample_age_s,
            driver_memory=args.driver_memory,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "snapshot_id": result.snapshot_id,
                "out": result.out_path,
                "rows_read": result.rows_read,
                "rows_rejected": dict(result.rows_rejected),
                "rows_duplicate": result.rows_duplicate,
                "tasks": result.tasks,
                "workers": result.workers,
                "groups": result.groups,
                "split_candidates": result.split_candidates,
                "wall_time_s": round(result.wall_time_s, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
