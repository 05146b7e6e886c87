"""The compacted sample archive: the folded sample files again, as Parquet clustered by task.

Why: a full rebuild that re-reads the sample log shuffles every sample by task and sorts it; that
shuffle alone costs more than 1 M samples/s allows on 2 cores (docs/loadstats.md). Each micro-batch
of the incremental run therefore also writes the rows it folded as one *segment*, bucketed by
task and sorted by (task, sample order) inside each file, and a full rebuild reads the segments
(vectorized Parquet, one bucket per Spark task, no shuffle) plus only the sample files no batch
has folded yet (``loadstats.rebuild``).

Layout (beside ``versions/`` in the state directory)::

    STATE/segments/<batch_id>-<uuid>/
        tasks/bucket=<b>/part-*.parquet   valid task rows (row-level checks passed; the worker
                                          check is the rebuild's), sorted by SORT_KEYS
        workers/part-*.parquet            per (group, worker): its latest valid worker row
        _segment.json                     rows read, row-level rejects, the sample files it holds

A segment is written under a hidden name and renamed whole; it only counts once ``CURRENT``
lists it (``compacted.segments``), and ``CURRENT`` is swapped in the same commit as the state
version. A crash before that swap leaves an unlisted segment, removed at the next commit; a
re-run of the batch writes it again. Segments merge two by two when the older is not larger than
the newer (a binary counter: about log2(batches) segments, each row rewritten as often).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from groupcoord.figures import RESOURCE_COLUMNS
from groupcoord.loadstats.sorted_runs import SORT_KEYS, TASK_ROW_COLUMNS
from groupcoord.loadstats.transforms import REJECT_REASONS

__all__ = [
    "BUCKETS",
    "SEGMENTS",
    "Segment",
    "add_segment",
    "batch_files",
    "bucket_files",
    "latest_workers_table",
    "normalize_file",
    "prune_segments",
    "read_segment",
    "write_segment",
]

log = logging.getLogger(__name__)

#: Buckets per segment: the rebuild's parallelism (one Spark task per bucket). Fixed per archive
#: (recorded in ``CURRENT``); 16 keeps both cores of a small host busy and files near 100 MB at 20 M rows.
BUCKETS = 16
SEGMENTS = "segments"
_META = "_segment.json"
WORKER_COLUMNS: tuple[str, ...] = ("group_id", "worker_id", "ts_ms", *RESOURCE_COLUMNS)


@dataclass(frozen=True)
class Segment:
    """One segment's ``_segment.json``: what the rebuild adds up without reading the rows."""

    name: str
    rows_read: int
    rejected: Mapping[str, int]  # row-level reasons (every reason but unknown_worker)
    files: tuple[str, ...]  # normalized paths of the sample files whose rows it holds

    def to_json(self) -> dict[str, Any]:
        return {"rows_read": self.rows_read, "rows_rejected": dict(self.rejected), "files": list(self.files)}


def normalize_file(uri: str) -> str:
    """One spelling per sample file: Spark's ``file:///a%20b`` and ``/a b`` are the same path."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("", "file"):
        return os.path.normpath(urllib.parse.unquote(parsed.path))
    return uri


def source_log_entries(checkpoint: str) -> Iterator[dict[str, Any]]:
    """Every file entry of Spark's file-source checkpoint logs (``CHECKPOINT/sources/<n>/<batch>``: a
    ``v1`` line, then one JSON object per file with ``path`` and ``batchId``; every tenth log folded
    into ``<batch>.compact``). An internal Spark format, read here only: by the archive (which files
    a batch took) and by follow mode (how many files no batch has taken yet)."""
    for entry in glob.glob(os.path.join(checkpoint, "sources", "*", "*")):
        try:
            with open(entry, encoding="utf-8") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                yield item


def batch_files(checkpoint: str, batch_id: int) -> list[str]:
    """The sample files Spark's file source gave micro-batch ``batch_id`` (from its checkpoint log).

    Spark logs them before the batch runs (``CHECKPOINT/sources/<n>/<batch>``, folded into
    ``<batch>.compact`` every tenth batch); a batch's own DataFrame does not list them.
    """
    files: set[str] = set()
    for item in source_log_entries(checkpoint):
        if int(item.get("batchId", -1)) == batch_id and "path" in item:
            files.add(normalize_file(item["path"]))
    return sorted(files)


def _bucket_column(buckets: int) -> Any:
    # Spark's hash partitioning is pmod(murmur3(keys, 42), n), as F.hash: partition p holds bucket p only
    return F.pmod(F.hash("group_id", "task_id"), F.lit(buckets))


def write_segment(
    tagged: DataFrame,
    segments_root: str,
    batch_id: int,
    files: Sequence[str],
    *,
    counts: Mapping[str | None, int] | None = None,
    buckets: int = BUCKETS,
) -> Segment:
    """Write ``tagged`` (``tag_rejects`` output: sample columns + ``_reject``) as a new segment.

    ``counts``: rows per row-level ``_reject`` value (None: valid) when the caller has them
    already; else they are counted here. Returns the segment, renamed into place but not yet
    listed anywhere (see the module docstring).
    """
    name = f"{batch_id:012d}-{uuid.uuid4().hex[:8]}"
    with _unpublished(segments_root, name) as tmp:
        if counts is None:
            counts = {r["_reject"]: int(r["count"]) for r in tagged.groupBy("_reject").count().collect()}
        valid = F.col("_reject").isNull()
        tasks = tagged.where(F.col("task_id").isNotNull() & valid).select(*TASK_ROW_COLUMNS)
        (
            tasks.repartition(buckets, "group_id", "task_id")
            .select("*", _bucket_column(buckets).alias("bucket"))
            .sortWithinPartitions("bucket", *SORT_KEYS)
            .write.partitionBy("bucket")
            .parquet("file://" + os.path.join(tmp, "tasks"))
        )
        workers = tagged.where(F.col("task_id").isNull() & valid)
        latest = workers.groupBy("group_id", "worker_id").agg(F.max(F.struct("ts_ms", *RESOURCE_COLUMNS)).alias("_l"))
        latest.select("group_id", "worker_id", *(F.col(f"_l.{c}").alias(c) for c in ("ts_ms", *RESOURCE_COLUMNS))).coalesce(
            1
        ).write.parquet("file://" + os.path.join(tmp, "workers"))
        segment = Segment(
            name=name,
            rows_read=sum(counts.values()),
            rejected={r: int(counts.get(r, 0)) for r in REJECT_REASONS if r != "unknown_worker"},
            files=tuple(sorted(normalize_file(f) for f in files)),
        )
        _publish(segments_root, tmp, segment)
    return segment


@contextmanager
def _unpublished(segments_root: str, name: str) -> Iterator[str]:
    """A hidden directory to build segment ``name`` in; removed if building it fails."""
    tmp = os.path.join(segments_root, f".tmp-{name}")
    os.makedirs(tmp)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _publish(segments_root: str, tmp: str, segment: Segment) -> None:
    """Its metadata, then the whole segment renamed into place at once (still listed nowhere)."""
    _write_meta(tmp, segment)
    os.replace(tmp, os.path.join(segments_root, segment.name))


def _write_meta(directory: str, segment: Segment) -> None:
    with open(os.path.join(directory, _META), "w", encoding="utf-8") as f:
        json.dump(segment.to_json(), f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


def read_segment(segments_root: str, name: str) -> Segment:
    with open(os.path.join(segments_root, name, _META), encoding="utf-8") as f:
        meta = json.load(f)
    return Segment(name, int(meta["rows_read"]), dict(meta["rows_rejected"]), tuple(meta["files"]))


def bucket_files(segment_dir: str, bucket: int) -> list[str]:
    """The Parquet files of one bucket of one segment (none when no task of the bucket was in it)."""
    return sorted(glob.glob(os.path.join(segment_dir, "tasks", f"bucket={bucket}", "*.parquet")))


def _read_tables(paths: Iterable[str], columns: Sequence[str]) -> pa.Table | None:
    tables = [pq.read_table(p, columns=list(columns)) for p in paths]
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else None


def latest_workers_table(segment_dirs: Iterable[str]) -> pa.Table:
    """Per (group, worker): the greatest ``(ts_ms, resources)`` row over the segments' worker tables
    (the full rebuild's ``latest_workers``: a plain max, so segments combine in any order)."""
    paths = [p for d in segment_dirs for p in glob.glob(os.path.join(d, "workers", "*.parquet"))]
    table = _read_tables(paths, WORKER_COLUMNS)
    schema = pa.schema([pa.field(c, pa.string() if c.endswith("_id") else pa.int64() if c == "ts_ms" else pa.float64())
                        for c in WORKER_COLUMNS])
    if table is None:
        return schema.empty_table()
    table = table.cast(schema).sort_by([(c, "ascending") for c in WORKER_COLUMNS])
    group, worker = table["group_id"].to_numpy(zero_copy_only=False), table["worker_id"].to_numpy(zero_copy_only=False)
    last = np.ones(len(group), dtype=bool)
    last[:-1] = (group[1:] != group[:-1]) | (worker[1:] != worker[:-1])
    return table.filter(pa.array(last))


def _merge(segments_root: str, older: Segment, newer: Segment, buckets: int) -> Segment:
    """One segment holding both, each bucket's rows sorted again (on the driver, with pyarrow)."""
    name = f"{newer.name.split('-')[0]}-{uuid.uuid4().hex[:8]}"
    dirs = [os.path.join(segments_root, s.name) for s in (older, newer)]
    with _unpublished(segments_root, name) as tmp:
        for b in range(buckets):
            table = _read_tables([p for d in dirs for p in bucket_files(d, b)], TASK_ROW_COLUMNS)
            if table is None:
                continue
            os.makedirs(os.path.join(tmp, "tasks", f"bucket={b}"))
            table = table.sort_by([(c, "ascending") for c in SORT_KEYS])
            pq.write_table(table, os.path.join(tmp, "tasks", f"bucket={b}", "part-00000.parquet"))
        os.makedirs(os.path.join(tmp, "workers"), exist_ok=True)
        pq.write_table(latest_workers_table(dirs), os.path.join(tmp, "workers", "part-00000.parquet"))
        merged = Segment(
            name=name,
            rows_read=older.rows_read + newer.rows_read,
            rejected={r: int(older.rejected.get(r, 0)) + int(newer.rejected.get(r, 0)) for r in older.rejected},
            files=tuple(sorted({*older.files, *newer.files})),
        )
        _publish(segments_root, tmp, merged)
    return merged


def add_segment(segments_root: str, listed: Sequence[str], new: Segment, buckets: int = BUCKETS) -> list[str]:
    """The segment list after ``new``: appended, then the two newest merged while the older is not
    larger (rows read) than the newer. Merged segments are new directories; the ones they replace
    stay until :func:`prune_segments` runs after the commit (a crash before it loses nothing)."""
    stack = [read_segment(segments_root, n) for n in listed] + [new]
    while len(stack) >= 2 and stack[-2].rows_read <= stack[-1].rows_read:
        newer, older = stack.pop(), stack.pop()
        stack.append(_merge(segments_root, older, newer, buckets))
    return [s.name for s in stack]


def prune_segments(segments_root: str, listed: Sequence[str]) -> None:
    """Remove every segment directory ``CURRENT`` does not list (merged away, or left by a crash)."""
    keep = set(listed)
    try:
        names = os.listdir(segments_root)
    except FileNotFoundError:
        return
    for n in names:
        if n not in keep:
            shutil.rmtree(os.path.join(segments_root, n), ignore_errors=True)
