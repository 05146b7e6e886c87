"""The load statistics job: sample log in, load snapshot out (PySpark).

:func:`run` does the I/O: it reads the sample log (:func:`read_samples`), chains the pure
transforms of ``loadstats.transforms`` over two passes (the worker rows, then the task rows
with one shuffle), writes the snapshot's Parquet tables and ``_meta.json`` into a temporary
directory and swaps it into place atomically (:func:`_swap_into_place`). :func:`main` is the
``spark-submit loadstats/job.py`` entry point.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark at the top, and nothing
the coordinator, worker or assignors import imports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

if __name__ == "__main__" and __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # pyspark's import-time notice about pandas 3
    from pyspark.sql import DataFrame, Observation, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

from groupcoord.loadstats.rebuild import rebuild_from_archive
from groupcoord.loadstats.samples import SAMPLE_COLUMNS, sample_spark_schema
from groupcoord.loadstats.session import (
    DEFAULT_MAX_SAMPLE_AGE_S,
    JobResult,
    _is_local_path,
    _local,
    _swap_into_place,
    build_session,
)
from groupcoord.loadstats.stream import one_line
from groupcoord.loadstats.transforms import (
    CORRUPT,
    REJECT_REASONS,
    TASK_COLUMNS,
    WORKER_COLUMNS,
    SplitThresholds,
    coded_task_rows,
    fresh_since,
    latest_workers,
    reject_metrics,
    snapshot_tasks,
    split_candidates,
    tag_rejects,
    task_stats,
    worker_stats,
)

__all__ = [
    "DEFAULT_MAX_SAMPLE_AGE_S",
    "JobResult",
    "build_session",
    "main",
    "read_samples",
    "run",
    "REJECT_REASONS",
    "TASK_COLUMNS",
    "WORKER_COLUMNS",
    "SplitThresholds",
]

log = logging.getLogger(__name__)

_STAGE = "stage-latest-workers"  # inside the snapshot's temp dir, removed before the swap (no leading
# "_" or ".": Spark would call the path hidden and warn)
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
# Running


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
    spark_conf: Mapping[str, str] | None = None,
    state_path: str | None = None,
    use_archive: bool = True,
) -> JobResult:
    """Read the sample log under ``samples_path``, write a snapshot at ``out_path``.

    With ``use_archive`` and a compacted archive of this log in the incremental state
    (``state_path``, default ``OUT.state``), the folded samples are read from the archive and
    only the newer files from the log (``loadstats.rebuild``): the same snapshot, without
    shuffling the history. ``JobResult.extra["source"]`` says which ran (``archive`` or ``log``).

    ``OUT/tasks/`` and ``OUT/workers/`` (Parquet) and ``OUT/_meta.json`` appear together (see
    :func:`_swap_into_place`). ``out_path`` must be a local or mounted path; ``samples_path`` is
    any path Spark reads. With ``spark=None`` a session is created (``master=None``: leave the
    master to spark-submit; ``spark_conf``: more Spark settings, e.g. executor memory on a
    cluster) and stopped at the end; a given session is left running.
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
    session = spark if spark is not None else build_session(master, driver_memory=driver_memory, extra_conf=spark_conf)
    try:
        if use_archive:
            try:
                archived = rebuild_from_archive(
                    session, samples_path, out_path, state_path=state_path, short_samples=short_samples,
                    long_samples=long_samples, max_sample_age_s=max_sample_age_s, thresholds=thresholds,
                )
            except Exception as exc:  # noqa: BLE001 - e.g. executors without pyarrow: the log still has every sample
                log.warning("full rebuild: the archive could not be used (%s): reading the whole log", one_line(exc))
                archived = None
            if archived is not None:
                log.info("load snapshot %s written to %s from the archive: %s", archived.snapshot_id, out_path, archived)
                return archived
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
            describe = session.sparkContext.setJobDescription  # names the passes in the Spark UI and its REST API
            describe("loadstats: worker pass")
            latest_workers(worker_rows).write.mode("overwrite").parquet(parquet_path(_STAGE))
            workers = session.read.parquet(parquet_path(_STAGE))
            since = fresh_since(workers, max_age_ms)
            # pass 2: the task rows -> averages (one shuffle)
            coded = coded_task_rows(tag_rejects(samples, "task"), workers).observe(task_rows_seen, *reject_metrics())
            good = coded.where(F.col("_reject").isNull()).drop("_reject")
            stats = task_stats(good, short_samples, long_samples, duplicates=repeats)
            tasks = split_candidates(snapshot_tasks(stats, workers, since), thresholds)
            describe("loadstats: task pass")
            tasks.repartition(1).sortWithinPartitions("group_id", "task_id").write.mode("overwrite").parquet(
                parquet_path("tasks")
            )
            written = session.read.parquet(parquet_path("tasks"))
            describe("loadstats: worker stats")
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
            describe("loadstats: summary")
            summary = written.agg(
                F.count(F.lit(1)).alias("tasks"),
                F.count(F.when(F.col("split_candidate"), 1)).alias("splits"),
            ).collect()[0]
            wsum = (
                session.read.parquet(parquet_path("workers"))
                .agg(F.count(F.lit(1)).alias("workers"), F.countDistinct("group_id").alias("groups"))
                .collect()[0]
            )
            describe(None)  # type: ignore[arg-type]  # PySpark accepts None: clears it
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
            extra={"source": "log"},
        )
        log.info("load snapshot %s written to %s: %s", snapshot_id, out_path, result)
        return result
    finally:
        if own_session:
            session.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit loadstats/job.py --samples P --out O`` (or ``python -m groupcoord.loadstats.job``)."""
    parser = argparse.ArgumentParser(prog="groupcoord.loadstats.job", description="Build a load snapshot from the sample log.")
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
