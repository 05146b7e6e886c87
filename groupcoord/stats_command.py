"""``groupcoord stats``: run the load statistics job, then (optionally) publish the snapshot."""

from __future__ import annotations

import argparse
import sys

__all__ = ["run_stats_command", "publish_snapshots"]


def publish_snapshots(out: str, coordinator: str) -> list[str]:
    """Send every group's snapshot under ``out`` to the coordinator; returns the group ids sent."""
    from groupcoord import errors
    from groupcoord.admin import AdminClient
    from loadstats.snapshot_io import read_snapshots
    from groupcoord.wire import snapshot_to_pb

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


def run_stats_command(args: argparse.Namespace) -> int:
    from loadstats.job import run

    try:
        result = run(args.samples, args.out, master=args.master, short_samples=args.short_samples,
                     long_samples=args.long_samples, max_sample_age_s=args.max_sample_age_s)
    except (FileNotFoundError, ValueError) as error:
        print(f"groupcoord stats: {error}", file=sys.stderr)
        return 2
    rejected = ", ".join(f"{k}={v}" for k, v in result.rows_rejected.items() if v) or "none"
    print(f"snapshot {result.snapshot_id} -> {args.out}: {result.rows_read} rows read "
          f"(rejected: {rejected}; repeats counted once: {result.rows_duplicate}), {result.groups} group(s), {result.tasks} task(s), {result.workers} worker(s), "
          f"{result.split_candidates} split candidate(s), {result.wall_time_s:.1f}s")
    if result.rows_read == 0:
        print(f"groupcoord stats: no samples under {args.samples} yet: the coordinator's sample log makes its "
              "files visible when it rolls them (every minute, and when it stops)", file=sys.stderr)
    if args.coordinator:
        sent = publish_snapshots(args.out, args.coordinator)
        print(f"published to {args.coordinator}: {', '.join(sent) or 'nothing'}")
    return 0
