"""``groupcoord stats``: run the load statistics job, then (optionally) publish the snapshot.

PySpark and pyarrow come with the ``stats`` extra; without them the command
says which extra to install and exits 2, before anything imports them.
"""

from __future__ import annotations

import argparse
import sys

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.cli.common import STATS_EXTRA_HINT, missing_stats_extra
from groupcoord.wire import snapshot_to_pb

__all__ = ["publish_snapshots", "run_stats"]


def publish_snapshots(out: str, coordinator: str) -> list[str]:
    """Send every group's snapshot under ``out`` to the coordinator; returns the group ids sent."""
    from loadstats.snapshot_io import read_snapshots  # lazy: reads Parquet with pyarrow (the stats extra)

    sent = []
    with AdminClient(coordinator) as admin:
        for group_id, snapshot in sorted(read_snapshots(out).items()):
            try:
                admin.publish_load_snapshot(snapshot_to_pb(snapshot))
            except errors.GroupIdNotFoundError:
                print(f"groupcoord stats: group {group_id!r} is unknown to the coordinator; not published",
                      file=sys.stderr)
                continue
            sent.append(group_id)
    return sent


def run_stats(args: argparse.Namespace) -> int:
    missing = missing_stats_extra()
    if missing is not None:
        print(f"groupcoord stats: needs PySpark and pyarrow ({missing} is not installed): {STATS_EXTRA_HINT}",
              file=sys.stderr)
        return 2
    from loadstats.job import run  # lazy: the Spark job needs pyspark and pyarrow (the stats extra)

    try:
        result = run(args.samples, args.out, master=args.master, short_samples=args.short_samples,
                     long_samples=args.long_samples, max_sample_age_s=args.max_sample_age_s)
    except (FileNotFoundError, ValueError) as error:
        print(f"groupcoord stats: {error}", file=sys.stderr)
        return 2
    rejected = ", ".join(f"{k}={v}" for k, v in result.rows_rejected.items() if v) or "none"
    print(f"snapshot {result.snapshot_id} -> {args.out}: {result.rows_read} rows read "
          f"(rejected: {rejected}; repeats counted once: {result.rows_duplicate}), {result.groups} group(s), "
          f"{result.tasks} task(s), {result.workers} worker(s), {result.split_candidates} split candidate(s), "
          f"{result.wall_time_s:.1f}s")
    if result.rows_read == 0:
        print(f"groupcoord stats: no samples under {args.samples} yet: the coordinator's sample log makes its "
              "files visible when it rolls them (every minute, and when it stops)", file=sys.stderr)
    if args.coordinator:
        sent = publish_snapshots(args.out, args.coordinator)
        print(f"published to {args.coordinator}: {', '.join(sent) or 'nothing'}")
    return 0
