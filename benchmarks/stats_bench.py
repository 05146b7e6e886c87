"""Benchmarks of the load statistics job (issues 5 and 15).

**History mode** (default, issue 15): a sample log of 1 h, 6 h and 24 h of T tasks (10,000) and
W workers (100) reporting once a minute (one Parquet file per minute, in time order, as the
sample log rolls them), plus one more minute. Per history: the incremental state is built from
the history (catch-up, timed but not the point), the extra minute arrives, and in the same run
and the same warm session it times the incremental refresh (``loadstats.stream.run_incremental``:
Structured Streaming picks up the one new file, folds it into the state, writes the snapshot) and
the full rebuild (``loadstats.job.run``) over history + 1 minute, and checks that the two
snapshots agree (largest relative difference of any figure).

    python benchmarks/stats_bench.py                       # 1 h, 6 h, 24 h
    python benchmarks/stats_bench.py --quick               # smoke run, tiny sizes
    python benchmarks/stats_bench.py --hours 1 6 --master local[1]

**Throughput mode** (``--throughput``, issue 5): N shuffled samples (10 M, 20 M) through the full
rebuild next to the single-process reference (pyarrow sort + numpy recurrence). Then the rebuild
from the compacted archive (issue 25): an incremental run folds 7 of the 8 files (writing the
archive, timed as "fold 7/8"), the 8th arrives, and the full rebuild reads the archive plus that
file from the log ("archive + 1/8 new"); one more incremental run folds it, and the rebuild reads
the archive alone ("archive only"). Both are checked against the rebuild from the log (largest
relative difference of any figure).

Times exclude the JVM start (the session is created once and warmed up first). The machine's
load average is printed with the table: the cores may be shared.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from groupcoord.figures import RESOURCE_COLUMNS, TASK_COUNTS, TASK_RATES
from groupcoord.loadstats.samples import sample_arrow_schema

GROUPS = 4


def _dict_strings(prefix: str, codes: np.ndarray, n: int) -> pa.Array:
    dictionary = pa.array([f"{prefix}{i:05d}" for i in range(n)], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), dictionary)


def generate_shuffled(
    directory: str, n_samples: int, n_tasks: int, n_workers: int, seed: int = 1, files: int = 8
) -> int:
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


def _spark_api(spark: Any, path: str) -> Any:
    import json
    import urllib.request

    base = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/{path}", timeout=30) as response:
        return json.load(response)


def _ui_time(text: str) -> float:
    from datetime import datetime

    return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def stage_profile(spark: Any, after_job: int) -> tuple[list[tuple[str, float, float, int, float, float]], int]:
    """Per job description (the job's passes, see ``loadstats.job``) and side (reduce: reads a
    shuffle; map: writes one; scan: neither), from the Spark UI's REST API: wall seconds (each
    stage's submission to completion, summed), task seconds (executor run time), input records, shuffle
    written and read (MB). Returns the rows and the newest job id."""
    jobs = [j for j in _spark_api(spark, "jobs") if j["jobId"] > after_job]
    stages = {s["stageId"]: s for s in _spark_api(spark, "stages?status=complete")}
    by_pass: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        name = (job.get("description") or job.get("name", "?")).removeprefix("loadstats: ")
        for i in job["stageIds"]:
            if i not in stages:
                continue
            side = ("reduce" if stages[i]["shuffleReadBytes"] else "map" if stages[i]["shuffleWriteBytes"]
                    else "scan")
            by_pass.setdefault(f"{name}: {side}", []).append(stages[i])
    rows = []
    for name, ss in by_pass.items():
        if not ss:
            continue
        wall = sum(_ui_time(x["completionTime"]) - _ui_time(x["submissionTime"]) for x in ss)
        rows.append((name, wall, sum(x["executorRunTime"] for x in ss) / 1000.0,
                     sum(x["inputRecords"] for x in ss), sum(x["shuffleWriteBytes"] for x in ss) / 1e6,
                     sum(x["shuffleReadBytes"] for x in ss) / 1e6))
    return rows, max((j["jobId"] for j in jobs), default=after_job)


def print_profile(rows: list[tuple[str, float, float, int, float, float]]) -> None:
    print(f"    {'pass: side':<28} {'wall s':>7} {'task s':>7} {'input rows':>12} {'shuffle w MB':>12} {'shuffle r MB':>12}")
    for name, wall, task, records, written, read in rows:
        print(f"    {name[:28]:<28} {wall:>7.2f} {task:>7.2f} {records:>12,} {written:>12.1f} {read:>12.1f}")


def time_reference(directory: str) -> tuple[float, float, int]:
    from groupcoord.loadstats.reference import reference_arrow

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


BASE_MS = 1_700_000_000_000


def write_minutes(directory: str, first: int, count: int, n_tasks: int, n_workers: int, seed: int = 1) -> int:
    """Minutes ``first .. first+count-1`` of every worker's report, one Parquet file per minute.

    A worker's report in minute m: its worker row and a row per task it owns, at
    ``BASE + m min + worker jitter``. Files appear whole (written hidden, then renamed), as the
    sample log's do. Returns the task rows written.
    """
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    base_rate = rng.uniform(10, 5000, size=n_tasks)
    jitter = rng.integers(0, 3000, size=n_workers)
    task = np.arange(n_tasks)
    n = n_tasks + n_workers
    worker = np.concatenate([task % n_workers, np.arange(n_workers)])
    is_task = np.arange(n) < n_tasks
    tcodes = np.concatenate([task, np.zeros(n_workers, dtype=task.dtype)])
    task_ids = pa.array([f"t{i:06d}" for i in range(n_tasks)], pa.string()).take(pa.array(tcodes))
    keys = {
        "group_id": pa.array([f"g{i}" for i in range(GROUPS)], pa.string()).take(pa.array(worker % GROUPS)),
        "worker_id": pa.array([f"w{i:05d}" for i in range(n_workers)], pa.string()).take(pa.array(worker)),
        "task_id": pc.if_else(pa.array(is_task), task_ids, pa.scalar(None, pa.string())),
    }
    schema = sample_arrow_schema()
    for m in range(first, first + count):
        r = np.random.default_rng((seed, m))
        cols: dict[str, pa.Array] = {"ts_ms": pa.array(BASE_MS + m * 60_000 + jitter[worker].astype(np.int64)), **keys}
        noise = r.uniform(0.5, 1.5, size=(4, n))
        rate = base_rate[tcodes]
        for i, (name, scale) in enumerate(zip(TASK_RATES, (1.0, 2.0, 1024.0, 2048.0), strict=True)):
            cols[name] = pa.array(rate * scale * noise[i], mask=~is_task)
        for name, hi in zip(TASK_COUNTS, (50, 20, 40), strict=True):
            cols[name] = pa.array(r.integers(1, hi, size=n).astype(np.int32), mask=~is_task)
        for name in RESOURCE_COLUMNS:
            value = r.uniform(0, 100, size=n) if name.endswith("usage") else np.full(n, 100.0)
            cols[name] = pa.array(value, mask=is_task)
        tmp = os.path.join(directory, f".samples-{m:06d}.parquet")
        pq.write_table(pa.table([cols[f.name] for f in schema], schema=schema), tmp)
        os.replace(tmp, os.path.join(directory, f"samples-{m:06d}.parquet"))
    return count * n_tasks


def max_relative_difference(a_path: str, b_path: str) -> float:
    """The largest relative difference of any figure between two snapshots (inf: the rows differ)."""
    from groupcoord.loadstats.snapshot_io import read_snapshots

    a, b = read_snapshots(a_path), read_snapshots(b_path)
    if set(a) != set(b):
        return math.inf
    worst = 0.0
    for g in a:
        for kind in ("tasks", "workers"):
            left, right = getattr(a[g], kind), getattr(b[g], kind)
            if set(left) != set(right):
                return math.inf
            for key in left:
                other = asdict(right[key])
                for field, x in asdict(left[key]).items():
                    y = other[field]
                    if isinstance(x, float) and x != y:
                        worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
                    elif not isinstance(x, float) and x != y:
                        return math.inf
    return worst


def history(args: argparse.Namespace) -> int:
    """Issue 15's benchmark: incremental refresh vs full rebuild as the history grows."""
    from groupcoord.loadstats.job import build_session, run
    from groupcoord.loadstats.stream import run_incremental

    hours = [0.25, 0.5] if args.quick else args.hours
    n_tasks, n_workers = (500, 10) if args.quick else (args.tasks, args.workers)
    t0 = time.perf_counter()
    spark = build_session(args.master, driver_memory=args.driver_memory, app_name="groupcoord-stats-bench")
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    cores = spark.sparkContext.defaultParallelism
    lines = []
    load_before = os.getloadavg()
    try:
        warm = os.path.join(args.cache_dir, "warm-up")  # the JVM compiles the hot code here, not in the first point
        shutil.rmtree(warm, ignore_errors=True)
        samples = os.path.join(warm, "samples")
        write_minutes(samples, 0, 5, 1000, 10)
        run_incremental(samples, os.path.join(warm, "inc"), spark=spark)
        write_minutes(samples, 5, 1, 1000, 10)
        run_incremental(samples, os.path.join(warm, "inc"), spark=spark)
        run(samples, os.path.join(warm, "full"), spark=spark)
        for h in hours:
            minutes = round(h * 60)
            root = os.path.join(args.cache_dir, f"history-{minutes}m-t{n_tasks}-w{n_workers}")
            shutil.rmtree(root, ignore_errors=True)
            samples = os.path.join(root, "samples")
            history_samples = write_minutes(samples, 0, minutes, n_tasks, n_workers)
            c0 = time.perf_counter()
            run_incremental(samples, os.path.join(root, "inc"), spark=spark, max_files_per_trigger=args.catch_up_files)
            catch_up = time.perf_counter() - c0
            refreshes = []
            for i in range(args.refreshes):  # one more minute each; the median is reported
                new = write_minutes(samples, minutes + i, 1, n_tasks, n_workers)
                inc = run_incremental(samples, os.path.join(root, "inc"), spark=spark)
                assert inc.extra["batches"] == 1 and inc.extra["rows_late_new"] == 0, inc.extra
                refreshes.append(inc.wall_time_s)
            refresh_s = sorted(refreshes)[len(refreshes) // 2]
            full = run(samples, os.path.join(root, "full"), spark=spark)
            diff = max_relative_difference(os.path.join(root, "inc"), os.path.join(root, "full"))
            total = history_samples + new * args.refreshes
            lines.append((h, history_samples, new, catch_up, refresh_s, full.wall_time_s, total, diff))
            print(
                f"  {h:g} h done: refreshes {', '.join(f'{r:.2f}' for r in refreshes)} s, "
                f"full {full.wall_time_s:.2f} s",
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
    load_after = os.getloadavg()
    print()
    print(
        f"load statistics, history mode: {n_tasks:,} tasks, {n_workers} workers, one report a minute; "
        f"master={args.master} ({cores} cores), JVM+session start {startup:.1f} s (not included)"
    )
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} ({os.cpu_count()} cores)"
    )
    header = (
        f"{'history':>8} {'samples':>11} {'new':>7} | {'catch-up s':>10} | {'refresh s':>9} | "
        f"{'full s':>7} {'full samples/s':>14} | {'max rel diff':>12}"
    )
    print(header)
    print("-" * len(header))
    for h, hist, new, catch_up, refresh, full_s, total, diff in lines:
        print(
            f"{h:>7g}h {hist:>11,} {new:>7,} | {catch_up:>10.2f} | {refresh:>9.2f} | "
            f"{full_s:>7.2f} {total / full_s:>14,.0f} | {diff:>12.1e}"
        )
    print(
        "samples: task rows (worker rows besides). catch-up: building the state from the history. refresh: the "
        "incremental run over one new minute (median of --refreshes), warm session. full: rebuild over history + the "
        "new minutes. max rel diff: "
        "incremental snapshot vs full rebuild, same run."
    )
    return 0


def throughput(args: argparse.Namespace) -> int:
    """Issue 5's benchmark: shuffled samples through the full rebuild next to the reference."""
    if args.quick:
        sizes, n_tasks, n_workers = [20_000], 200, 10
    else:
        sizes, n_tasks, n_workers = args.sizes or [10_000_000, 20_000_000], args.tasks, args.workers

    from groupcoord.loadstats.job import build_session, run

    t0 = time.perf_counter()
    spark = build_session(args.master, driver_memory=args.driver_memory, app_name="groupcoord-stats-bench")
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0
    cores = spark.sparkContext.defaultParallelism
    rows_out = []
    archive_out: list[tuple[Any, ...]] = []
    try:
        # warm-up on a small set: the JVM compiles the job's hot code once, not inside the first point
        warm = os.path.join(args.cache_dir, "warm-up")
        generate_shuffled(warm, 200_000, 1_000, 10)
        run(warm, os.path.join(args.cache_dir, "out-warm-up"), spark=spark)
        for n in sizes:
            data = os.path.join(args.cache_dir, f"n{n}-t{n_tasks}-w{n_workers}")
            g0 = time.perf_counter()
            total = generate_shuffled(data, n, n_tasks, n_workers)
            gen_s = time.perf_counter() - g0
            out = os.path.join(args.cache_dir, f"out-n{n}")
            last_job = max((j["jobId"] for j in _spark_api(spark, "jobs")), default=-1) if args.profile else -1
            result = run(data, out, spark=spark)
            assert result.rows_rejected and sum(result.rows_rejected.values()) == 0, result.rows_rejected
            job_s = result.wall_time_s
            if args.profile:
                profile, _ = stage_profile(spark, last_job)
                print(f"  {n:,} samples: {job_s:.2f} s; where the time went (stages by pass):")
                print_profile(profile)
            if args.no_reference:
                read_s = ref_s = float("nan")
            else:
                read_s, ref_s, ref_tasks = time_reference(data)
                assert ref_tasks == result.tasks, (ref_tasks, result.tasks)
            rows_out.append((n, total, result.tasks, result.workers, gen_s, job_s, read_s, ref_s))
            archive_out.append((n, *_archive_rebuilds(spark, args, data, out, n)))
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
    print()
    print("full rebuild from the compacted archive (same samples; diff: largest relative difference to the "
          "rebuild from the log)")
    header = (
        f"{'samples':>11} | {'fold 7/8 s':>10} | {'archive+1/8 new s':>17} {'samples/s':>11} {'diff':>8} | "
        f"{'archive only s':>14} {'samples/s':>11} {'diff':>8}"
    )
    print(header)
    print("-" * len(header))
    for n, fold_s, mixed_s, mixed_diff, only_s, only_diff in archive_out:
        print(
            f"{n:>11,} | {fold_s:>10.2f} | {mixed_s:>17.2f} {n / mixed_s:>11,.0f} {mixed_diff:>8.1e} | "
            f"{only_s:>14.2f} {n / only_s:>11,.0f} {only_diff:>8.1e}"
        )
    print(f"load average at the end: {os.getloadavg()}")
    return 0


def _remove_snapshot_or_dir(path: str) -> None:
    """A directory, or a snapshot (a symlink into ``.NAME.versions`` beside it) with its versions."""
    if os.path.islink(path):
        os.unlink(path)
        parent, name = os.path.split(path)
        shutil.rmtree(os.path.join(parent, f".{name}.versions"), ignore_errors=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _archive_rebuilds(spark: Any, args: argparse.Namespace, data: str, log_out: str, n: int) -> tuple[float, ...]:
    """Fold 7/8 of ``data`` incrementally (the archive), then time the rebuild with the last 1/8 new
    and, after folding it too, with nothing new. Returns fold s, both rebuild times and their diffs."""
    from groupcoord.loadstats.job import run
    from groupcoord.loadstats.stream import run_incremental

    parts = sorted(f for f in os.listdir(data) if f.endswith(".parquet"))
    samples = os.path.join(args.cache_dir, f"archive-n{n}")
    out = os.path.join(args.cache_dir, f"out-archive-n{n}")
    state = os.path.join(args.cache_dir, f"state-archive-n{n}")
    for path in (samples, state):
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(samples)
    for f in parts[:-1]:  # hard links: the same files, no copy
        os.link(os.path.join(data, f), os.path.join(samples, f))
    def fold(label: str) -> float:
        last_job = max((j["jobId"] for j in _spark_api(spark, "jobs")), default=-1) if args.profile else -1
        t0 = time.perf_counter()
        run_incremental(samples, out + "-inc", spark=spark, state_path=state)
        seconds = time.perf_counter() - t0
        if args.profile:  # the archive's share of an incremental run: its "fold: archive" pass
            profile, _ = stage_profile(spark, last_job)
            print(f"  {n:,} samples, incremental run folding {label}: {seconds:.2f} s")
            print_profile(profile)
        return seconds

    fold_s = fold("7/8")
    os.link(os.path.join(data, parts[-1]), os.path.join(samples, parts[-1]))
    timings: list[float] = [fold_s]
    for label in ("archive + 1/8 new", "archive only"):
        if label == "archive only":
            fold("the last 1/8")
        last_job = max((j["jobId"] for j in _spark_api(spark, "jobs")), default=-1) if args.profile else -1
        result = run(samples, out, spark=spark, state_path=state)
        assert result.extra["source"] == "archive", result.extra
        if args.profile:
            profile, _ = stage_profile(spark, last_job)
            print(f"  {n:,} samples, rebuild from the {label}: {result.wall_time_s:.2f} s")
            print_profile(profile)
        timings += [result.wall_time_s, max_relative_difference(log_out, out)]
    if not args.keep:
        for path in (samples, state, out + "-inc", out):
            _remove_snapshot_or_dir(path)
    return tuple(timings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    parser.add_argument("--throughput", action="store_true", help="issue 5's benchmark (shuffled 10 M, 20 M)")
    parser.add_argument("--hours", type=float, nargs="*", default=[1, 6, 24], help="history lengths (history mode)")
    parser.add_argument(
        "--catch-up-files",
        type=int,
        default=120,
        help="files per micro-batch while building the state from the history",
    )
    parser.add_argument("--refreshes", type=int, default=1, help="refreshes per history (a minute each; median shown)")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs, states and snapshots")
    parser.add_argument("--sizes", type=int, nargs="*", help="sample counts (throughput mode; default 10M 20M)")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "groupcoord-stats-bench"))
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="throughput mode: per pass of the job, wall and task seconds and shuffle sizes "
                             "(from the Spark UI's REST API)")
    args = parser.parse_args(argv)
    return throughput(args) if args.throughput else history(args)


if __name__ == "__main__":
    sys.exit(main())
