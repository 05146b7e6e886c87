"""Per-task statistics by one scan over rows sorted by (task, sample order): no Spark, no shuffle.

The compacted archive (``loadstats.compaction``) keeps the valid task rows clustered by task into
buckets, each file sorted by ``SORT_KEYS``. :func:`fold_bucket` turns one bucket's rows into the
per-task state rows (``loadstats.incremental.STATE_TASK_COLUMNS``) with the full rebuild's rules
(``loadstats.transforms.task_stats``): a row equal to the one before it in every order column is
a repeat and counts once, the k-th distinct sample of a task of K gets the closed form's weight,
and the sums run in sample order, so the results equal the Spark plan's to rounding.

Pure: pyarrow tables in, a table and counts out (numpy does the arithmetic, vectorized).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupcoord.figures import LONG, SHORT, TASK_COUNTS, TASK_RATES, averaged
from groupcoord.loadstats.samples import TASK_SAMPLE_ORDER

__all__ = ["SORT_KEYS", "TASK_ROW_COLUMNS", "BucketResult", "fold_bucket", "state_task_schema", "worker_key"]

#: The archive's task row columns, and the order every archive file is sorted in.
SORT_KEYS: tuple[str, ...] = ("group_id", "task_id", *TASK_SAMPLE_ORDER)
TASK_ROW_COLUMNS = SORT_KEYS
_SEP = "\x1f"  # joins group and worker ids into one key (a unit separator never appears in ids)


def worker_key(group_id: pa.Array | pa.ChunkedArray, worker_id: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """``group_id`` + separator + ``worker_id``: one string per (group, worker) pair."""
    return pc.binary_join_element_wise(group_id, worker_id, _SEP)


def state_task_schema() -> pa.Schema:
    """``loadstats.incremental.STATE_TASK_COLUMNS`` as an Arrow schema (the state's Parquet types)."""
    fields = [pa.field(c, pa.string()) for c in ("group_id", "task_id", "worker_id")]
    fields += [pa.field("ts_ms", pa.int64()), pa.field("n", pa.int64())]
    fields += [pa.field(f"last_{c}", pa.float64()) for c in TASK_RATES]
    fields += [pa.field(c, pa.int32()) for c in TASK_COUNTS]
    fields += [pa.field(c, pa.float64()) for c in (*averaged(SHORT), *averaged(LONG))]
    return pa.schema(fields)


@dataclass(frozen=True)
class BucketResult:
    """One bucket's tasks (``state_task_schema``), its repeats and its rows of unknown workers."""

    tasks: pa.Table
    duplicates: int
    unknown_workers: int


def _weights(k: np.ndarray, n: np.ndarray, cap: int) -> np.ndarray:
    """``loadstats.transforms._weight`` in numpy, the same operations in the same order."""
    log_a = math.log1p(-1.0 / cap) if cap > 1 else float("-inf")
    m = n - np.maximum(k, cap)
    with np.errstate(invalid="ignore", over="ignore"):
        saturated = np.where(m == 0, 1.0 / cap, np.exp(m.astype(np.float64) * log_a) / cap)
        return np.where(n <= cap, 1.0 / n.astype(np.float64), saturated)


def _codes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Equal values, equal integers (for equality tests only, not order)."""
    encoded = pc.dictionary_encode(column)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def fold_bucket(
    rows: pa.Table, known_workers: pa.Array, short_samples: int, long_samples: int, *, presorted: bool = False
) -> BucketResult:
    """Per task of ``rows`` (the archive's task row columns): the state row the full rebuild implies.

    ``known_workers``: :func:`worker_key` of every worker with a valid worker row; other rows are
    ``unknown_worker`` rejects. ``presorted``: the rows are already in ``SORT_KEYS`` order (one
    archive file); otherwise they are sorted here (runs of several files).
    """
    schema = state_task_schema()
    total = rows.num_rows
    if total == 0:
        return BucketResult(schema.empty_table(), 0, 0)
    known = pc.is_in(worker_key(rows["group_id"], rows["worker_id"]), value_set=known_workers)
    unknown = total - int(pc.sum(known).as_py() or 0)
    if unknown:
        rows = rows.filter(known)
    if rows.num_rows == 0:
        return BucketResult(schema.empty_table(), 0, unknown)
    task_code = _codes(pc.binary_join_element_wise(rows["group_id"], rows["task_id"], _SEP))
    if not presorted:
        # tasks need only be contiguous: their integer code first, then the exact sample order
        rows = rows.append_column("_t", pa.array(task_code))
        rows = rows.sort_by([("_t", "ascending"), *((c, "ascending") for c in TASK_SAMPLE_ORDER)])
        task_code = rows["_t"].to_numpy()
        rows = rows.drop_columns(["_t"])
    ts = rows["ts_ms"].to_numpy()
    worker = _codes(rows["worker_id"])
    rates = {c: rows[c].to_numpy() for c in TASK_RATES}
    counts = {c: rows[c].to_numpy() for c in TASK_COUNTS}

    start = np.ones(len(ts), dtype=bool)
    start[1:] = task_code[1:] != task_code[:-1]
    same = ~start
    same[1:] &= (ts[1:] == ts[:-1]) & (worker[1:] == worker[:-1])
    for values in (*rates.values(), *counts.values()):
        same[1:] &= values[1:] == values[:-1]
    duplicates = int(same.sum())
    if duplicates:
        keep = ~same
        rows = rows.filter(pa.array(keep))
        ts, start = ts[keep], start[keep]
        rates = {c: v[keep] for c, v in rates.items()}
        counts = {c: v[keep] for c, v in counts.items()}

    firsts = np.flatnonzero(start)
    lasts = np.append(firsts[1:], len(ts)) - 1
    sizes = lasts - firsts + 1
    task_index = np.repeat(np.arange(len(firsts)), sizes)
    k = np.arange(len(ts)) - firsts[task_index] + 1
    n = sizes[task_index]
    w_short, w_long = _weights(k, n, short_samples), _weights(k, n, long_samples)

    def sums(weights: np.ndarray) -> list[np.ndarray]:
        return [np.bincount(task_index, weights=rates[c] * weights, minlength=len(firsts)) for c in TASK_RATES]

    first_rows, last_rows = pa.array(firsts), pa.array(lasts)
    columns: list[pa.Array | pa.ChunkedArray | np.ndarray] = [
        rows["group_id"].take(first_rows),
        rows["task_id"].take(first_rows),
        rows["worker_id"].take(last_rows),
        ts[lasts],
        sizes.astype(np.int64),
        *(rates[c][lasts] for c in TASK_RATES),
        *(counts[c][lasts].astype(np.int32) for c in TASK_COUNTS),
        *sums(w_short),
        *sums(w_long),
    ]
    arrays = [c if not isinstance(c, np.ndarray) else pa.array(c) for c in columns]
    table = pa.Table.from_arrays(arrays, schema=schema)
    return BucketResult(table, duplicates, unknown)
