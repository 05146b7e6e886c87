"""The load statistics job: sample log in, load snapshot out (PySpark).

:func:`run` checks its arguments, builds (or borrows) the Spark session and picks the source:
the incremental state's compacted archive when it can (``loadstats.rebuild``), else the whole
log (``loadstats.log_rebuild``: :func:`read_samples`, two passes, the snapshot swapped into place
atomically by :func:`_swap_into_place`). :func:`main` is the ``spark-submit loadstats/job.py``
entry point.

This module is the ``groupcoord[stats]`` extra's: it imports PySpark at the top, and nothing
the coordinator, worker or assignors import imports it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence

if __name__ == "__main__" and __package__ in (None, ""):  # run as a script by spark-submit
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # pyspark's import-time notice about pandas 3
    from pyspark.sql import SparkSession

from groupcoord.loadstats.log_rebuild import read_samples, rebuild_from_log
from groupcoord.loadstats.rebuild import rebuild_from_archive
from groupcoord.loadstats.session import (
    DEFAULT_MAX_SAMPLE_AGE_S,
    JobResult,
    _is_local_path,
    _local,
    _swap_into_place,  # noqa: F401 - imported from here (tests/coordinator/process/test_snapshot_watch.py)
    build_session,
)
from groupcoord.loadstats.stream import one_line
from groupcoord.loadstats.transforms import (
    REJECT_REASONS,
    TASK_COLUMNS,
    WORKER_COLUMNS,
    SplitThresholds,
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
    out_path = _checked_out_path(samples_path, out_path, short_samples, long_samples, max_sample_age_s)
    started = time.monotonic()
    own_session = spark is None
    session = spark if spark is not None else build_session(master, driver_memory=driver_memory, extra_conf=spark_conf)
    try:
        if use_archive:
            archived = _rebuild_from_archive_or_none(
                session, samples_path, out_path, state_path=state_path, short_samples=short_samples,
                long_samples=long_samples, max_sample_age_s=max_sample_age_s, thresholds=thresholds,
            )
            if archived is not None:
                return archived
        result = rebuild_from_log(
            session, samples_path, out_path, short_samples=short_samples, long_samples=long_samples,
            max_sample_age_s=max_sample_age_s, thresholds=thresholds, started=started,
        )
        log.info("load snapshot %s written to %s: %s", result.snapshot_id, out_path, result)
        return result
    finally:
        if own_session:
            session.stop()


def _checked_out_path(samples_path: str, out_path: str, short_samples: int, long_samples: int,
                      max_sample_age_s: float | None) -> str:
    """The snapshot's absolute path, once the arguments are checked: bad input fails with one clear
    error before a Spark session (seconds of JVM start) is built for nothing."""
    if short_samples < 1 or long_samples < 1:
        raise ValueError(f"sample caps must be >= 1 (short={short_samples}, long={long_samples})")
    if max_sample_age_s is not None and max_sample_age_s < 0:
        raise ValueError(f"max_sample_age_s must be >= 0, got {max_sample_age_s}")
    if _is_local_path(samples_path) and not os.path.exists(_local(samples_path)):
        raise FileNotFoundError(f"samples path {samples_path!r} does not exist")
    if not _is_local_path(out_path):
        raise ValueError(f"out_path must be a local or mounted path, got {out_path!r}")
    return os.path.abspath(_local(out_path))


def _rebuild_from_archive_or_none(
    session: SparkSession, samples_path: str, out_path: str, *, state_path: str | None, short_samples: int,
    long_samples: int, max_sample_age_s: float | None, thresholds: SplitThresholds | None,
) -> JobResult | None:
    """The snapshot rebuilt from the incremental state's archive, or None to read the whole log.

    Why a failure here is only a warning: the archive is a shortcut (no shuffle of the history);
    when it cannot be used (no archive, another log, executors without pyarrow) the log still
    has every sample.
    """
    try:
        archived = rebuild_from_archive(
            session, samples_path, out_path, state_path=state_path, short_samples=short_samples,
            long_samples=long_samples, max_sample_age_s=max_sample_age_s, thresholds=thresholds,
        )
    except Exception as exc:  # noqa: BLE001 - e.g. executors without pyarrow: the log still has every sample
        log.warning("full rebuild: the archive could not be used (%s): reading the whole log", one_line(exc))
        return None
    if archived is not None:
        log.info("load snapshot %s written to %s from the archive: %s", archived.snapshot_id, out_path, archived)
    return archived


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
