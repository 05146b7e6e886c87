"""Reference computations of the time averages, outside Spark.

* :func:`time_average` / :func:`reference_stats`: the small pure-Python sequential reference,
  literally the seed's recurrence (Pulsar's ``TimeAverageMessageData.update``)::

      n   = min(samples seen, max samples)
      avg = ((n - 1) * avg + x) / n

  applied per task in the sample order below. The Spark job must agree with it to 1e-9 relative.
* :func:`reference_arrow`: the same recurrence vectorised with numpy/pyarrow over a whole sample
  table in one process (the benchmark's baseline). It steps the recurrence once per sample rank,
  each step over all tasks at once, so it performs exactly the floating-point operations of the
  sequential reference.

Sample order (``loadstats.samples.TASK_SAMPLE_ORDER``, shared with the job): per
``(group_id, task_id)`` ascending by ``ts_ms``, then ``worker_id``, then the task figures in the
order of ``groupcoord.figures``. Rows tied on all of these are identical in every figure that
matters: they are one sample reported twice (a retried report) and count once.

Like ``loadstats.job`` this module belongs to the ``groupcoord[stats]`` extra: it imports numpy
and pyarrow at the top.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupcoord.assignors.snapshot import TASK_STATS_FIELDS
from groupcoord.figures import LONG, RESOURCE_COLUMNS, TASK_COUNTS, TASK_RATES, TERMS, averaged, samples_column
from groupcoord.loadstats.samples import TASK_SAMPLE_ORDER

__all__ = ["reference_arrow", "reference_stats", "reference_worker_stats", "task_order_key", "time_average"]

#: The task columns the references compute: the snapshot's, without ``split_candidate``.
_TASK_OUTPUT: tuple[str, ...] = ("group_id", *(c for c in TASK_STATS_FIELDS if c != "split_candidate"))


def time_average(values: Iterable[float], max_samples: int) -> tuple[float, int]:
    """Run the recurrence over ``values`` (already in order); return ``(average, capped sample count)``."""
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    avg = 0.0
    n = 0
    for x in values:
        n = min(n + 1, max_samples)
        avg = ((n - 1) * avg + x) / n
    return avg, n


def task_order_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The deterministic sample order within one task (see the module docstring)."""
    return tuple(row[c] for c in TASK_SAMPLE_ORDER)


def _group_since(rows: Sequence[Mapping[str, Any]], max_sample_age_ms: int | None) -> dict[str, int | None]:
    """Per group: the oldest latest-sample time still current (its newest worker row minus the age)."""
    newest: dict[str, int] = {}
    for row in rows:
        if row.get("task_id") is None:
            newest[row["group_id"]] = max(newest.get(row["group_id"], row["ts_ms"]), row["ts_ms"])
    return {g: (None if max_sample_age_ms is None else t - max_sample_age_ms) for g, t in newest.items()}


def _is_current(group_id: str, ts_ms: int, since: Mapping[str, int | None]) -> bool:
    limit = since.get(group_id)
    return limit is None or ts_ms >= limit


def reference_stats(
    rows: Iterable[Mapping[str, Any]],
    short_samples: int = 10,
    long_samples: int = 1000,
    max_sample_age_ms: int | None = None,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per ``(group_id, task_id)``: the snapshot's task columns (without ``split_candidate``).

    ``rows`` are *valid* sample rows (dicts of the sample schema); worker rows only set each
    group's clock. Rows equal in every column count once (a retried report). A task whose latest
    sample is more than ``max_sample_age_ms`` behind its group's newest worker row is left out.
    """
    rows = list(rows)
    since = _group_since(rows, max_sample_age_ms)
    by_task: dict[tuple[str, str], dict[tuple[Any, ...], Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("task_id") is None:
            continue
        by_task.setdefault((row["group_id"], row["task_id"]), {})[task_order_key(row)] = row
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for key, distinct in by_task.items():
        task_rows = [distinct[k] for k in sorted(distinct)]
        last = task_rows[-1]
        if not _is_current(key[0], last["ts_ms"], since):
            continue
        stats: dict[str, Any] = {"group_id": key[0], "task_id": key[1], "worker_id": last["worker_id"]}
        for term, n_max in zip(TERMS, (short_samples, long_samples), strict=True):
            for col, name in zip(TASK_RATES, averaged(term), strict=True):
                avg, n = time_average((r[col] for r in task_rows), n_max)
                stats[name] = avg
            stats[samples_column(term)] = n
        for col in TASK_COUNTS:
            stats[col] = last[col]
        out[key] = stats
    return out


def reference_worker_stats(
    rows: Iterable[Mapping[str, Any]],
    task_stats: Mapping[tuple[str, str], Mapping[str, Any]],
    max_sample_age_ms: int | None = None,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per current ``(group_id, worker_id)``: latest resource columns, task count and long-term totals."""
    rows = list(rows)
    since = _group_since(rows, max_sample_age_ms)
    latest: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        if row.get("task_id") is not None:
            continue
        key = (row["group_id"], row["worker_id"])
        order = (row["ts_ms"], *(row[c] for c in RESOURCE_COLUMNS))
        prev = latest.get(key)
        if prev is None or order > (prev["ts_ms"], *(prev[c] for c in RESOURCE_COLUMNS)):
            latest[key] = row
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for key, row in latest.items():
        if not _is_current(key[0], row["ts_ms"], since):
            continue
        out[key] = {
            "group_id": key[0],
            "worker_id": key[1],
            **{c: row[c] for c in RESOURCE_COLUMNS},
            "num_tasks": 0,
            **dict.fromkeys(averaged(LONG), 0.0),
            "ts_ms": row["ts_ms"],
        }
    for (group_id, _task), stats in task_stats.items():
        w = out.get((group_id, stats["worker_id"]))
        if w is None:
            continue
        w["num_tasks"] += 1
        for c in averaged(LONG):
            w[c] += stats[c]
    return out


def _recurrence_by_rank(
    values: np.ndarray, starts: np.ndarray, counts: np.ndarray, order_by_count: np.ndarray, max_samples: int
) -> np.ndarray:
    """Vectorised recurrence: ``values`` sorted by (task, order); tasks given by ``starts``/``counts``."""
    n_tasks = len(starts)
    avg = np.zeros(n_tasks, dtype=np.float64)
    if n_tasks == 0:
        return avg
    # Tasks sorted by descending count: at rank k the active tasks are a prefix of that order.
    sorted_counts = counts[order_by_count]
    sorted_starts = starts[order_by_count]
    acc = np.zeros(n_tasks, dtype=np.float64)
    max_k = int(sorted_counts[0])
    # number of tasks with count >= k, for k = 1..max_k
    active = np.searchsorted(-sorted_counts, -np.arange(1, max_k + 1), side="right")
    for k in range(1, max_k + 1):
        m = int(active[k - 1])
        n = float(min(k, max_samples))
        x = values[sorted_starts[:m] + (k - 1)]
        acc[:m] = ((n - 1.0) * acc[:m] + x) / n
    avg[order_by_count] = acc
    return avg


def reference_arrow(table: pa.Table, short_samples: int = 10, long_samples: int = 1000) -> pa.Table:
    """The task columns of the snapshot computed in one process with pyarrow + numpy.

    ``table`` holds valid sample rows (the sample schema); worker rows are skipped. Returns one
    row per ``(group_id, task_id)`` sorted by them.
    """
    tasks = table.filter(pc.is_valid(table["task_id"]))
    keys = [("group_id", "ascending"), ("task_id", "ascending")] + [(c, "ascending") for c in TASK_SAMPLE_ORDER]
    tasks = tasks.sort_by(keys)
    n_rows = tasks.num_rows
    names = _TASK_OUTPUT
    if n_rows == 0:
        return _empty_result(names)
    group = tasks["group_id"].combine_chunks()
    task = tasks["task_id"].combine_chunks()
    # Boundaries where (group_id, task_id) changes.
    change = np.ones(n_rows, dtype=bool)
    if n_rows > 1:
        same_g = pc.equal(group[1:], group[:-1]).to_numpy(zero_copy_only=False)
        same_t = pc.equal(task[1:], task[:-1]).to_numpy(zero_copy_only=False)
        change[1:] = ~(same_g & same_t)
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, n_rows))
    lasts = starts + counts - 1
    order_by_count = np.argsort(-counts, kind="stable")
    out: dict[str, Any] = {
        "group_id": group.take(pa.array(starts)),
        "task_id": task.take(pa.array(starts)),
        "worker_id": tasks["worker_id"].combine_chunks().take(pa.array(lasts)),
    }
    for term, n_max in zip(TERMS, (short_samples, long_samples), strict=True):
        out[samples_column(term)] = pa.array(np.minimum(counts, n_max).astype(np.int64))
        for col, name in zip(TASK_RATES, averaged(term), strict=True):
            values = tasks[col].to_numpy().astype(np.float64, copy=False)
            out[name] = pa.array(_recurrence_by_rank(values, starts, counts, order_by_count, n_max))
    for col in TASK_COUNTS:
        out[col] = tasks[col].combine_chunks().take(pa.array(lasts))
    return pa.table({n: out[n] for n in names})


def _empty_result(names: Sequence[str]) -> pa.Table:
    types = {"group_id": pa.string(), "task_id": pa.string(), "worker_id": pa.string()}
    cols = {}
    for n in names:
        if n in types:
            cols[n] = pa.array([], type=types[n])
        elif n.endswith("_samples"):
            cols[n] = pa.array([], type=pa.int64())
        elif n in TASK_COUNTS:
            cols[n] = pa.array([], type=pa.int32())
        else:
            cols[n] = pa.array([], type=pa.float64())
    return pa.table(cols)
