"""Incremental load statistics: continue the seed's recurrence from a per-task state (PySpark).

The full rebuild (``loadstats.transforms.task_stats``) evaluates the closed form of the
recurrence ``n = min(k, N)``, ``avg = ((n-1)*avg + x)/n`` over all K samples of a task::

    K <= N:  avg_K = sum(x_k) / K
    K >  N:  avg_K = sum(x_k * a**(K - max(k, N))) / N,    a = 1 - 1/N

Split the samples into the K0 already folded into the state (average ``avg0``) and m new ones
(global ranks K0+1 .. K0+m, K = K0 + m). The new samples get exactly the weights of the full
form (:func:`loadstats.transforms._weight` with k and K shifted by K0), and the old ones, whatever
they were, enter only through ``avg0`` with one coefficient::

    K <= N:  c0 = K0 / K
    K >  N:  c0 = a**(K - max(K0, N)) * min(K0, N) / N

(K0 <= N: ``avg0`` is the plain mean, so the old samples' total weight ``K0 * a**(K-N)/N`` is
``c0 * avg0``; K0 > N: each old weight is the old one times ``a**(K-K0)``.) So a run costs what
its new samples cost, and with samples arriving in order it equals the full rebuild to rounding
(tested to 1e-9 relative).

Late samples. The state keeps each task's last sample (its order key, ``TASK_SAMPLE_ORDER``).
A new task row whose key equals it is a repeat (a retried report) and counts once, as in the
full rebuild; one whose key sorts before it is **late**: it is counted (``rows_late``) and left
out, since putting it in its place would need the samples the state no longer has. The averages
are never touched by a late row. A full rebuild (``--full``) puts late rows in their place.

Per worker the state is the latest valid worker row (greatest ``(ts_ms, resources)``, as in the
full rebuild), which is a plain max and needs no order at all.
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from groupcoord.figures import LONG, RESOURCE_COLUMNS, SHORT, TASK_COUNTS, TASK_RATES, averaged, samples_column
from groupcoord.loadstats.samples import TASK_SAMPLE_ORDER
from groupcoord.loadstats.transforms import TASK_COLUMNS, _weight

__all__ = [
    "STATE_TASK_COLUMNS",
    "STATE_WORKER_COLUMNS",
    "merge_tasks",
    "merge_workers",
    "classify_new_rows",
    "tag_unknown_workers",
    "state_snapshot_tasks",
    "state_snapshot_workers",
]

#: The last sample's figures kept so the next run can tell a repeat from a late row.
_LAST = tuple(f"last_{c}" for c in TASK_RATES)
_SHORT_AVG = averaged(SHORT)
_LONG_AVG = averaged(LONG)

#: Per task: identity, samples seen (distinct, ``n``), the last sample's order key (``ts_ms``,
#: ``worker_id``, ``last_*`` rates, the counts), and both averages.
STATE_TASK_COLUMNS: tuple[str, ...] = (
    "group_id", "task_id", "worker_id", "ts_ms", "n", *_LAST, *TASK_COUNTS, *_SHORT_AVG, *_LONG_AVG,
)
#: Per worker: its latest valid worker row.
STATE_WORKER_COLUMNS: tuple[str, ...] = ("group_id", "worker_id", "ts_ms", *RESOURCE_COLUMNS)

_KEY = ("group_id", "task_id")


def merge_workers(state: DataFrame, tagged_workers: DataFrame) -> DataFrame:
    """The worker state after a batch: per worker the greatest ``(ts_ms, resources)`` row.

    ``tagged_workers``: the batch's worker rows from ``tag_rejects(batch, "worker")``.
    """
    new = tagged_workers.where(F.col("_reject").isNull()).select(*STATE_WORKER_COLUMNS)
    both = state.select(*STATE_WORKER_COLUMNS).unionByName(new)
    latest = both.groupBy("group_id", "worker_id").agg(F.max(F.struct("ts_ms", *RESOURCE_COLUMNS)).alias("_l"))
    return latest.select("group_id", "worker_id", *(F.col(f"_l.{c}").alias(c) for c in ("ts_ms", *RESOURCE_COLUMNS)))


def tag_unknown_workers(tagged: DataFrame, workers: DataFrame) -> DataFrame:
    """``tag_rejects`` output with ``unknown_worker`` tagged on the task rows whose worker has no
    valid worker row, in the state or in the batch (``workers``: the merged worker state)."""
    known = F.broadcast(workers.select("group_id", "worker_id", F.lit(True).alias("_known")))
    rows = tagged.join(known, ["group_id", "worker_id"], "left")
    unknown = F.col("task_id").isNotNull() & F.col("_known").isNull()
    reject = F.coalesce(F.col("_reject"), F.when(unknown, F.lit("unknown_worker")))
    return rows.select(*(c for c in tagged.columns if c != "_reject"), reject.alias("_reject"))


def classify_new_rows(good_tasks: DataFrame, state: DataFrame) -> DataFrame:
    """Valid new task rows joined with their task's state, with ``_kind``: ``new``, ``repeat``, ``late``.

    ``repeat``: equal to the state's last sample, or to an earlier row of the same batch;
    ``late``: sorts before the state's last sample. Columns: the task sample columns, ``_n0``
    (samples already in the state, 0 for a new task) and ``_kind``.
    """
    state_names = {c: (f"last_{c}" if c in TASK_RATES else c) for c in TASK_SAMPLE_ORDER}
    last = state.select(
        *_KEY,
        F.col("n").alias("_n0"),
        F.struct(*(F.col(state_names[c]).alias(c) for c in TASK_SAMPLE_ORDER)).alias("_last"),
    )
    rows = good_tasks.select(*_KEY, *TASK_SAMPLE_ORDER).join(last, list(_KEY), "left")
    key = F.struct(*(F.col(c) for c in TASK_SAMPLE_ORDER))  # same fields, names and types as _last
    last_key = F.col("_last")
    ordered = Window.partitionBy(*_KEY).orderBy(*TASK_SAMPLE_ORDER)
    repeat_in_batch = F.lit(True)
    for c in TASK_SAMPLE_ORDER:
        repeat_in_batch = repeat_in_batch & F.lag(c).over(ordered).eqNullSafe(F.col(c))
    kind = (
        F.when(last_key.isNotNull() & (key < last_key), F.lit("late"))
        .when(last_key.isNotNull() & (key == last_key), F.lit("repeat"))
        .when(repeat_in_batch, F.lit("repeat"))
        .otherwise(F.lit("new"))
    )
    return rows.select(*_KEY, *TASK_SAMPLE_ORDER, F.coalesce(F.col("_n0"), F.lit(0)).alias("_n0"), kind.alias("_kind"))


def _old_coefficient(n0: Column, n_total: Column, cap: int) -> Column:
    """``c0`` of the module docstring: the weight of the state's average after the batch."""
    log_a = math.log1p(-1.0 / cap) if cap > 1 else float("-inf")
    m = n_total - F.greatest(n0, F.lit(cap))
    decay = F.when(m == 0, F.lit(1.0)).otherwise(F.exp(m.cast("double") * F.lit(log_a)))
    saturated = decay * F.least(n0, F.lit(cap)).cast("double") / F.lit(float(cap))
    return F.when(n0 == 0, F.lit(0.0)).when(n_total <= cap, n0.cast("double") / n_total.cast("double")).otherwise(
        saturated
    )


def merge_tasks(classified: DataFrame, state: DataFrame, short_samples: int, long_samples: int) -> DataFrame:
    """The task state after a batch: every state task, updated with its ``new`` rows.

    ``classified``: :func:`classify_new_rows`. The new rows of a task are ranked after the
    state's ``n`` samples and weighted as in the full form; the state's averages enter through
    :func:`_old_coefficient`.
    """
    new = classified.where(F.col("_kind") == "new")
    ordered = Window.partitionBy(*_KEY).orderBy(*TASK_SAMPLE_ORDER)
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    ranked = new.select(
        "*",
        (F.col("_n0") + F.row_number().over(ordered)).alias("_k"),
        (F.col("_n0") + F.count(F.lit(1)).over(whole)).alias("_n"),
    )
    k, n = F.col("_k"), F.col("_n")
    ranked = ranked.select("*", _weight(k, n, short_samples).alias("_ws"), _weight(k, n, long_samples).alias("_wl"))
    batch = ranked.groupBy(*_KEY).agg(
        F.max("_n").alias("_n"),
        F.max_by(F.struct(*TASK_SAMPLE_ORDER), "_k").alias("_last"),
        *(F.sum(F.col(c) * F.col("_ws")).alias(f"_s_{a}") for c, a in zip(TASK_RATES, _SHORT_AVG, strict=True)),
        *(F.sum(F.col(c) * F.col("_wl")).alias(f"_s_{a}") for c, a in zip(TASK_RATES, _LONG_AVG, strict=True)),
    )
    joined = state.select(*STATE_TASK_COLUMNS).join(batch, list(_KEY), "full_outer")
    n0 = F.coalesce(F.col("n"), F.lit(0).cast("long"))
    n_total = F.coalesce(F.col("_n"), n0)
    has_new = F.col("_n").isNotNull()

    def avg(name: str, cap: int) -> Column:
        old = F.coalesce(F.col(name), F.lit(0.0))
        return F.when(has_new, _old_coefficient(n0, n_total, cap) * old + F.col(f"_s_{name}")).otherwise(F.col(name))

    def latest(state_col: str, sample_col: str) -> Column:
        return F.when(has_new, F.col(f"_last.{sample_col}")).otherwise(F.col(state_col))

    return joined.select(
        *_KEY,
        latest("worker_id", "worker_id").alias("worker_id"),
        latest("ts_ms", "ts_ms").alias("ts_ms"),
        n_total.cast("long").alias("n"),
        *(latest(f"last_{c}", c).alias(f"last_{c}") for c in TASK_RATES),
        *(latest(c, c).cast("int").alias(c) for c in TASK_COUNTS),
        *(avg(a, short_samples).alias(a) for a in _SHORT_AVG),
        *(avg(a, long_samples).alias(a) for a in _LONG_AVG),
    )


def _since(workers: DataFrame, max_sample_age_ms: int | None) -> DataFrame:
    """Per group: the oldest latest-sample time still current (its newest worker row minus the age)."""
    newest = workers.groupBy("group_id").agg(F.max("ts_ms").alias("_newest"))
    if max_sample_age_ms is None:
        return newest.select("group_id", F.lit(None).cast("long").alias("_since"))
    return newest.select("group_id", (F.col("_newest") - F.lit(max_sample_age_ms)).alias("_since"))


def _fresh(df: DataFrame, since: DataFrame) -> DataFrame:
    joined = df.join(F.broadcast(since), ["group_id"])
    return joined.where(F.col("_since").isNull() | (F.col("ts_ms") >= F.col("_since"))).drop("_since", "_newest")


def state_snapshot_tasks(
    tasks: DataFrame, workers: DataFrame, short_samples: int, long_samples: int, max_sample_age_ms: int | None
) -> DataFrame:
    """The snapshot's task rows (without ``split_candidate``) from the state, stale tasks left out.

    Same rule as the full rebuild: a task is current when its last sample is no more than the
    age behind its group's newest worker row (groups without a worker row have no task rows:
    their task rows were all ``unknown_worker``).
    """
    current = _fresh(tasks, _since(workers, max_sample_age_ms))
    named = {
        samples_column(SHORT): F.least(F.col("n"), F.lit(short_samples)).cast("long"),
        samples_column(LONG): F.least(F.col("n"), F.lit(long_samples)).cast("long"),
    }
    return current.select(
        *((named[c].alias(c) if c in named else F.col(c)) for c in TASK_COLUMNS if c != "split_candidate")
    )


def state_snapshot_workers(workers: DataFrame, tasks: DataFrame, max_sample_age_ms: int | None) -> DataFrame:
    """The snapshot's worker rows: current workers, their latest row, task count and long-term totals.

    ``tasks``: the snapshot's task rows (a task belongs to its latest reporter).
    """
    current = _fresh(workers, _since(workers, max_sample_age_ms))
    totals = tasks.groupBy("group_id", "worker_id").agg(
        F.count(F.lit(1)).alias("num_tasks"), *(F.sum(c).alias(c) for c in _LONG_AVG)
    )
    joined = current.join(totals, ["group_id", "worker_id"], "left")
    return joined.select(
        "group_id",
        "worker_id",
        *RESOURCE_COLUMNS,
        F.coalesce(F.col("num_tasks"), F.lit(0)).cast("long").alias("num_tasks"),
        *(F.coalesce(F.col(c), F.lit(0.0)).alias(c) for c in _LONG_AVG),
        F.col("ts_ms").cast("long").alias("ts_ms"),
    )
