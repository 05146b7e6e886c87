"""What every Spark run of the load statistics shares: the session, the result, the snapshot's swap.

The full rebuild (``loadstats.job``), its archive path (``loadstats.rebuild``), the incremental
run (``loadstats.stream``) and follow mode (``loadstats.follow``) all build their session, report
their result and put a finished snapshot in place the same way; this module sits below all of them.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)  # pyspark's import-time notice about pandas 3
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_MAX_SAMPLE_AGE_S", "JobResult", "build_session"]

#: Two of ``load_report_update_max_interval`` (15 min): a live worker has reported by then.
DEFAULT_MAX_SAMPLE_AGE_S = 1800.0

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
        # the rebuild from the archive runs Python on the executors (loadstats.rebuild): on this machine
        # they are this interpreter, which has pyarrow and groupcoord, not whatever "python3" PATH finds
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
