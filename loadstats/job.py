"""The load statistics job: sample log in, load snapshot out (PySpark).

Thin job, pure transforms: :func:`clean`, :func:`task_stats`, :func:`split_candidates` and
:func:`worker_stats` are DataFrame -> DataFrame functions that start and end with a ``select``
(the schema contract) and use native Spark functions only. :func:`run` does the I/O.

Time averages, in closed form
-----------------------------
Per task, the samples x_1..x_K in the sample order (``loadstats.reference``) go through Pulsar's
recurrence with cap N: ``n = min(k, N)``, ``avg_k = ((n-1)·avg_{k-1} + x_k)/n``. For k <= N this
is the running mean; for k > N it is ``avg_k = a·avg_{k-1} + x_k/N`` with ``a = 1 - 1/N``.
Unrolling gives the final value as a weighted sum ``avg_K = Σ_k w_k·x_k`` with

* K <= N:  ``w_k = 1/K``
* K >  N:  ``w_k = a^(K - max(k, N)) / N``  (the first N samples share the weight of avg_N)

The job ranks each task's samples with one window (``row_number`` for k, a full-frame ``count``
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if __name__ == "__main__" and __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loadstats.samples import (
    RESOURCE_COLUMNS,
    RESOURCE_USAGE_COLUMNS,
    SAMPLE_COLUMNS,
    TASK_COUNT_COLUMNS,
    TASK_RATE_COLUMNS,
    sample_spark_schema,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "REJECT_REASONS",
    "TASK_COLUMNS",
    "WORKER_COLUMNS",
    "JobResult",
    "SplitThresholds",
    "clean",
    "main",
    "read_samples",
    "run",
    "split_candidates",
    "task_stats",
    "worker_stats",
]

log = logging.getLogger(__name__)

MIBI = 1024 * 1024
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

TASK_COLUMNS: tuple[str, ...] = (
    "group_id",
    "task_id",
    "worker_id",
    "short_samples",
    *(f"short_{c}" for c in TASK_RATE_COLUMNS),
    "long_samples",
    *(f"long_{c}" for c in TASK_RATE_COLUMNS),
    *TASK_COUNT_COLUMNS,
    "split_candidate",
)

WORKER_COLUMNS: tuple[str, ...] = (
    "group_id",
    "worker_id",
    *RESOURCE_COLUMNS,
    "num_tasks",
    *(f"long_{c}" for c in TASK_RATE_COLUMNS),
    "ts_ms",
)

#: Sample order within a task (see ``loadstats.reference``): ts, worker, then the values.
TASK_ORDER: tuple[str, ...] = ("ts_ms", "worker_id", *TASK_RATE_COLUMNS, *TASK_COUNT_COLUMNS)


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
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

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


def clean(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Split raw samples into valid rows and reject counts.

    Returns ``(good, bad_counts)``: ``good`` has exactly the sample columns; ``bad_counts`` has
    ``(reason string, count long)``, one row per reason that occurred (lazy: collect it).
    ``df`` has the sample columns and optionally ``_corrupt_record``.
    """
    from pyspark.sql import functions as F

    corrupt = F.col(CORRUPT) if CORRUPT in df.columns else F.lit(None).cast("string")
    df = df.select(*SAMPLE_COLUMNS, corrupt.alias(CORRUPT))

    is_task = F.col("task_id").isNotNull()
    is_worker = ~is_task

    def empty(c: str) -> Column:
        return F.col(c).isNull() | (F.length(F.col(c)) == 0)

    def not_finite(c: str) -> Column:
        return F.isnan(F.col(c)) | (F.abs(F.col(c)) == float("inf"))

    task_doubles = list(TASK_RATE_COLUMNS)
    task_all = task_doubles + list(TASK_COUNT_COLUMNS)
    reason = (
        F.when(F.col(CORRUPT).isNotNull(), F.lit("malformed"))
        .when(
            F.col("ts_ms").isNull() | empty("group_id") | empty("worker_id") | (F.length("task_id") == 0),
            F.lit("missing_key"),
        )
        .when(is_task & _any([F.col(c).isNull() for c in task_all]), F.lit("missing_value"))
        .when(is_worker & _any([F.col(c).isNull() for c in RESOURCE_COLUMNS]), F.lit("missing_value"))
        .when(is_task & _any([not_finite(c) for c in task_doubles]), F.lit("not_finite"))
        .when(is_worker & _any([not_finite(c) for c in RESOURCE_COLUMNS]), F.lit("not_finite"))
        .when(is_task & _any([F.col(c) < 0 for c in task_all]), F.lit("negative"))
        .when(is_worker & _any([F.col(c) < 0 for c in RESOURCE_USAGE_COLUMNS]), F.lit("negative"))
    )
    tagged = df.withColumn("_reject", reason)
    known = (
        tagged.where(F.col("_reject").isNull() & F.col("task_id").isNull())
        .select("group_id", "worker_id")
        .distinct()
        .withColumn("_known", F.lit(True))
    )
    tagged = tagged.join(F.broadcast(known), ["group_id", "worker_id"], "left").withColumn(
        "_reject",
        F.coalesce(
            F.col("_reject"),
            F.when(F.col("task_id").isNotNull() & F.col("_known").isNull(), F.lit("unknown_worker")),
        ),
    )
    good = tagged.where(F.col("_reject").isNull()).select(*SAMPLE_COLUMNS)
    counts = tagged.groupBy(F.coalesce(F.col("_reject"), F.lit("")).alias("reason")).count()
    return good, counts.select("reason", F.col("count").cast("long").alias("count"))


def _weight(k: Column, n_total: Column, cap: int) -> Column:
    """``w_k`` of the closed form for cap ``cap`` (see the module docstring)."""
    from pyspark.sql import functions as F

    if cap < 1:
        raise ValueError(f"sample cap must be >= 1, got {cap}")
    log_a = math.log1p(-1.0 / cap) if cap > 1 else float("-inf")
    m = n_total - F.greatest(k, F.lit(cap))
    saturated = F.when(m == 0, F.lit(1.0 / cap)).otherwise(F.exp(m.cast("double") * F.lit(log_a)) / F.lit(cap))
    return F.when(n_total <= cap, F.lit(1.0) / n_total.cast("double")).otherwise(saturated)


def task_stats(df: DataFrame, short_samples: int = 10, long_samples: int = 1000) -> DataFrame:
    """Per ``(group_id, task_id)``: short/long time averages and the latest counts and reporter.

    ``df``: valid samples (output of :func:`clean`); worker rows are ignored. The result has the
    snapshot's task columns except ``split_candidate``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tasks = df.where(F.col("task_id").isNotNull()).select(
        "group_id", "task_id", "worker_id", "ts_ms", *TASK_RATE_COLUMNS, *TASK_COUNT_COLUMNS
    )
    ordered = Window.partitionBy("group_id", "task_id").orderBy(*TASK_ORDER)
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = tasks.select(
        "*",
        F.row_number().over(ordered).alias("_k"),
        F.count(F.lit(1)).over(whole).alias("_n"),
    )
    k, n = F.col("_k"), F.col("_n")
    ranked = ranked.select("*", _weight(k, n, short_samples).alias("_ws"), _weight(k, n, long_samples).alias("_wl"))
    aggs = [
        F.max_by("worker_id", "_k").alias("worker_id"),
        F.least(F.max("_n"), F.lit(short_samples)).cast("long").alias("short_samples"),
        *(F.sum(F.col(c) * F.col("_ws")).alias(f"short_{c}") for c in TASK_RATE_COLUMNS),
        F.least(F.max("_n"), F.lit(long_samples)).cast("long").alias("long_samples"),
        *(F.sum(F.col(c) * F.col("_wl")).alias(f"long_{c}") for c in TASK_RATE_COLUMNS),
        *(F.max_by(c, "_k").cast("int").alias(c) for c in TASK_COUNT_COLUMNS),
    ]
    out = ranked.groupBy("group_id", "task_id").agg(*aggs)
    return out.select(*(c for c in TASK_COLUMNS if c != "split_candidate"))


def split_candidates(tasks: DataFrame, thresholds: SplitThresholds | None = None) -> DataFrame:
    """Add ``split_candidate`` (bool) to the output of :func:`task_stats` (see :class:`SplitThresholds`)."""
    from pyspark.sql import functions as F

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


def worker_stats(df: DataFrame, tasks: DataFrame) -> DataFrame:
    """Per ``(group_id, worker_id)``: latest resource row, task count and long-term totals.

    ``df``: valid samples; ``tasks``: output of :func:`task_stats` (a task belongs to its latest
    reporter, so ``num_tasks`` equals the number of snapshot task rows naming the worker). The
    latest worker row is the greatest by ``(ts_ms, resource values)``: ties broken by value.
    """
    from pyspark.sql import functions as F

    latest = (
        df.where(F.col("task_id").isNull())
        .groupBy("group_id", "worker_id")
        .agg(F.max(F.struct("ts_ms", *RESOURCE_COLUMNS)).alias("_l"))
        .select("group_id", "worker_id", *(F.col(f"_l.{c}").alias(c) for c in ("ts_ms", *RESOURCE_COLUMNS)))
    )
    totals = tasks.groupBy("group_id", "worker_id").agg(
        F.count(F.lit(1)).alias("num_tasks"),
        *(F.sum(f"long_{c}").alias(f"long_{c}") for c in TASK_RATE_COLUMNS),
    )
    joined = latest.join(totals, ["group_id", "worker_id"], "left")
    return joined.select(
        "group_id",
        "worker_id",
        *RESOURCE_COLUMNS,
        F.coalesce(F.col("num_tasks"), F.lit(0)).cast("long").alias("num_tasks"),
        *(F.coalesce(F.col(f"long_{c}"), F.lit(0.0)).alias(f"long_{c}") for c in TASK_RATE_COLUMNS),
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
) -> SparkSession:
    """Get or create a SparkSession for the job.

    ``master=None`` leaves the master to the environment (``spark-submit --master``, or
    ``spark.master`` in spark-defaults); without any, Spark's default applies. Driver memory only
    takes effect when this call starts the JVM.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if driver_memory and "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.config("spark.driver.memory", driver_memory)
    cores = os.cpu_count() or 2
    builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions or max(4, 4 * cores))).config(
        "spark.ui.showConsoleProgress", "false"
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
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


def run(
    samples_path: str,
    out_path: str,
    *,
    master: str | None = "local[*]",
    short_samples: int = 10,
    long_samples: int = 1000,
    spark: SparkSession | None = None,
    thresholds: SplitThresholds | None = None,
    driver_memory: str | None = "4g",
) -> JobResult:
    """Read the sample log under ``samples_path``, write a snapshot at ``out_path``.

    ``OUT/tasks/`` and ``OUT/workers/`` (Parquet) and ``OUT/_meta.json`` appear together (see
    :func:`_swap_into_place`). ``out_path`` must be a local or mounted path; ``samples_path`` is
    any path Spark reads. With ``spark=None`` a session is created (``master=None``: leave the
    master to spark-submit) and stopped at the end; a given session is left running.
    Raises ``FileNotFoundError`` when a local ``samples_path`` does not exist and ``ValueError``
    on bad caps.
    """
    from pyspark.sql import functions as F

    if short_samples < 1 or long_samples < 1:
        raise ValueError(f"sample caps must be >= 1 (short={short_samples}, long={long_samples})")
    if _is_local_path(samples_path) and not os.path.exists(_local(samples_path)):
        raise FileNotFoundError(f"samples path {samples_path!r} does not exist")
    if not _is_local_path(out_path):
        raise ValueError(f"out_path must be a local or mounted path, got {out_path!r}")
    out_path = os.path.abspath(_local(out_path))
    started = time.monotonic()
    own_session = spark is None
    session = spark if spark is not None else build_session(master, driver_memory=driver_memory)
    try:
        raw = read_samples(session, samples_path)
        good, bad_counts = clean(raw)
        tasks = split_candidates(task_stats(good, short_samples, long_samples), thresholds)

        created_ms = time.time_ns() // 1_000_000
        snapshot_id = f"{created_ms:015d}-{uuid.uuid4().hex[:8]}"
        parent, name = os.path.split(out_path)
        os.makedirs(parent or ".", exist_ok=True)
        tmp_dir = os.path.join(parent, f".{name}.tmp-{snapshot_id}")
        try:
            (
                tasks.repartition(1)
                .sortWithinPartitions("group_id", "task_id")
                .write.mode("overwrite")
                .parquet("file://" + os.path.join(tmp_dir, "tasks"))
            )
            # workers from the written task rows: the task averages are not computed twice
            written = session.read.parquet("file://" + os.path.join(tmp_dir, "tasks"))
            (
                worker_stats(good, written)
                .repartition(1)
                .sortWithinPartitions("group_id", "worker_id")
                .write.mode("overwrite")
                .parquet("file://" + os.path.join(tmp_dir, "workers"))
            )
            counts = {r["reason"]: int(r["count"]) for r in bad_counts.collect()}
            summary = written.agg(
                F.count(F.lit(1)).alias("tasks"),
                F.count(F.when(F.col("split_candidate"), 1)).alias("splits"),
            ).collect()[0]
            wsum = (
                session.read.parquet("file://" + os.path.join(tmp_dir, "workers"))
                .agg(F.count(F.lit(1)).alias("workers"), F.countDistinct("group_id").alias("groups"))
                .collect()[0]
            )
            rows_read = sum(counts.values())
            rejected = {r: counts.get(r, 0) for r in REJECT_REASONS}
            meta: dict[str, Any] = {
                "format_version": 1,
                "snapshot_id": snapshot_id,
                "created_ms": created_ms,
                "samples_path": samples_path,
                "short_samples_max": short_samples,
                "long_samples_max": long_samples,
                "split_thresholds": {
                    k: getattr(thresholds or SplitThresholds(), k)
                    for k in ("max_topics", "max_sessions", "max_msg_rate", "max_bandwidth_mbytes", "min_topics")
                },
                "rows_read": rows_read,
                "rows_rejected": rejected,
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
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args(argv)
    master = args.master
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = run(
            args.samples,
            args.out,
            master=master,
            short_samples=args.short_samples,
            long_samples=args.long_samples,
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
