"""Benchmark of the load statistics job (issue 5).

Generates N samples (task rows) over T tasks and W workers as Parquet (numpy + pyarrow, cached
under the temp dir), times ``loadstats.job.run`` on a local Spark session, and times the
single-process reference (pyarrow sort + numpy vectorised recurrence, ``loadstats.reference``)
on the same data in the same run. Prints a table.

    python benchmarks/stats_bench.py                 # 10 M and 20 M samples, local[*]
    python benchmarks/stats_bench.py --quick         # smoke run, tiny sizes
    python benchmarks/stats_bench.py --sizes 10000000 --master local[1]

The job's time excludes the JVM start (the session is created once, before the first point, and
warmed up by one run over 200,000 samples) and includes reading, cleaning, both averages, worker totals, splits, writing the snapshot and the
reject counts. The reference computes the task averages only, from an in-memory table (its
Parquet read is timed separately).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from groupcoord.figures import RESOURCE_COLUMNS, TASK_COUNTS, TASK_RATES
from loadstats.samples import sample_arrow_schema

GROUPS = 4


def _dict_strings(prefix: str, codes: np.ndarray, n: int) -> pa.Array:
    dictionary = pa.array([f"{prefix}{i:05d}" for i in range(n)], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), dictionary)


def generate(directory: str, n_samples: int, n_tasks: int, n_workers: int, seed: int = 1, files: int = 8) -> int:
    """Write the sample set (task rows + one worker row per report) as Parquet; return total rows."""
    marker = os.path.join(directory, "_COMPLETE")
    if os.path.exists(marker):
        with open(marker, encoding="utf-8") as f:
            return int(f.read())
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    rng = np.random.default_rng(seed)
    reports = max(1, n_samples // n_tasks)  # reports per worker; each task once per report
    task_ids = np.arange(n_tasks)
    owner = task_ids % n_workers
    order = np.argsort(owner, kind="stable")
    tasks_by_owner = task_ids[order]
    owners_sorted = owner[order]
    # per report r of worker w: ts = base + r * 5 s + worker jitter; the rows are shuffled below
    n_task_rows = reports * n_tasks
    rep = np.repeat(np.arange(reports), n_tasks)
    task = np.tile(tasks_by_owner, reports)
    worker = np.tile(owners_sorted, reports)
    jitter = rng.integers(0, 3000, size=n_workers)
    ts = 1_700_000_000_000 + rep.astype(np.int64) * 5000 + jitter[worker]
    base_rate = rng.uniform(10, 5000, size=n_tasks)
    cols: dict[str, pa.Array] = {}
    total = n_task_rows + reports * n_workers
    perm = rng.permutation(total)  # out-of-order log
    w_rep = np.repeat(np.arange(reports), n_workers)
    w_worker = np.tile(np.arange(n_workers), reports)
    all_ts = np.concatenate([ts, 1_700_000_000_000 + w_rep.astype(np.int64) * 5000 + jitter[w_worker]])[perm]
    all_worker = np.concatenate([worker, w_worker])[perm]
    all_task = np.concatenate([task, np.full(reports * n_workers, -1)])[perm]
    is_task = all_task >= 0
    cols["ts_ms"] = pa.array(all_ts)
    cols["group_id"] = _dict_strings("g", all_worker % GROUPS, GROUPS)
    cols["worker_id"] = _dict_strings("w", all_worker, n_workers)
    task_codes = np.where(is_task, all_task, 0)
    cols["task_id"] = pa.DictionaryArray.from_arrays(
        pa.array(task_codes.astype(np.int32), mask=~is_task),
        pa.array([f"t{i:06d}" for i in range(n_tasks)], pa.string()),
    )
    noise = rng.uniform(0.5, 1.5, size=(4, total))
    rate = base_rate[task_codes]
    for i, (name, scale) in enumerate(zip(TASK_RATES, (1.0, 2.0, 1024.0, 2048.0), strict=True)):
        cols[name] = pa.array(rate * scale * noise[i], mask=~is_task)
    for name, hi in zip(TASK_COUNTS, (50, 20, 40), strict=True):
        cols[name] = pa.array(rng.integers(1, hi, size=total).astype(np.int32), mask=~is_task)
    for name in RESOURCE_COLUMNS:
        value = rng.uniform(0, 100, size=total) if name.endswith("usage") else np.full(total, 100.0)
        cols[name] = pa.array(value, mask=is_task)
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
        if f.name in ("group_id", "worker_id", "task_id")
        else f
        for f in sample_arrow_schema()
    ]
    table = pa.table([cols[f.name] for f in fields], schema=pa.schema(fields))
    step = -(-total // files)
    for i in range(files):
        pq.write_table(
            table.slice(i * step, step), os.path.join(directory, f"part-{i:03d}.parquet"), row_group_size=1 << 20
        )
    with open(marker, "w", encoding="utf-8") as f:
        f.write(str(total))
    return total


def time_reference(directory: str) -> tuple[float, float, int]:
    from loadstats.reference import reference_arrow

    t0 = time.perf_counter()
    table = pq.read_table(directory)
    table = table.cast(
        pa.schema(
            [pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in table.schema]
        )
    )
    t1 = time.perf_counter()
    result = reference_arrow(table)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, result.num_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument("--sizes", type=int, nargs="*", help="sample counts (default 10M 20M)")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "groupcoord-stats-bench"))
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        sizes, n_tasks, n_workers = [20_000], 200, 10
    else:
        sizes, n_tasks, n_workers = args.sizes or [10_000_000, 20_000_000], args.tasks, args.workers

    from loadstats.job import build_session, run

    t0 = time.perf_counter()
    spark = build_session(args.master, driver_memory=args.driver_memory, app_name="groupcoord-stats-bench")
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    cores = spark.sparkContext.defaultParallelism
    rows_out = []
    try:
        # warm-up on a small set: the JVM compiles the job's hot code once, not inside the first point
        warm = os.path.join(args.cache_dir, "warm-up")
        generate(warm, 200_000, 1_000, 10)
        run(warm, os.path.join(args.cache_dir, "out-warm-up"), spark=spark)
        for n in sizes:
            data = os.path.join(args.cache_dir, f"n{n}-t{n_tasks}-w{n_workers}")
            g0 = time.perf_counter()
            total = generate(data, n, n_tasks, n_workers)
            gen_s = time.perf_counter() - g0
            out = os.path.join(args.cache_dir, f"out-n{n}")
            result = run(data, out, spark=spark)
            assert result.rows_rejected and sum(result.rows_rejected.values()) == 0, result.rows_rejected
            job_s = result.wall_time_s
            if args.no_reference:
                read_s = ref_s = float("nan")
            else:
                read_s, ref_s, ref_tasks = time_reference(data)
                assert ref_tasks == result.tasks, (ref_tasks, result.tasks)
            rows_out.append((n, total, result.tasks, result.workers, gen_s, job_s, read_s, ref_s))
    finally:
        spark.stop()

    print()
    print(
        f"load statistics job, master={args.master} ({cores} cores), JVM+session start {startup:.1f} s (not included)"
    )
    header = (
        f"{'samples':>11} {'rows':>11} {'tasks':>6} {'workers':>7} | {'job s':>7} {'job samples/s':>14} | "
        f"{'ref read s':>10} {'ref s':>7} {'ref samples/s':>14} | {'job/ref':>7}"
    )
    print(header)
    print("-" * len(header))
    for n, total, tasks, workers, _gen, job_s, read_s, ref_s in rows_out:
        ref_rate = float("nan") if math.isnan(ref_s) else n / ref_s
        print(
            f"{n:>11,} {total:>11,} {tasks:>6,} {workers:>7,} | {job_s:>7.2f} {n / job_s:>14,.0f} | "
            f"{read_s:>10.2f} {ref_s:>7.2f} {ref_rate:>14,.0f} | {ref_s / job_s:>7.2f}"
        )
    print("samples = task rows; rows = samples + worker rows. job/ref > 1: the job is faster.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
