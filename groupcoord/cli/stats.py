"""``groupcoord stats``: run the load statistics job, then (optionally) publish the snapshot.

Three ways to run it (see docs/loadstats.md):

* default: incremental, once. Spark's file stream source with ``Trigger.AvailableNow`` folds the
  sample files not seen yet into the state beside the snapshot (``OUT.state``), then writes the
  snapshot from the state. Its cost follows the new samples, not the history.
* ``--follow --every 60s``: the same, kept running in one warm Spark session; a snapshot (and a
  publish with ``--coordinator``) per interval in which files arrived.
* ``--full``: the full rebuild over the whole log (late samples in their place); the state is
  left as it is.

PySpark and pyarrow come with the ``stats`` extra; without them the command
says which extra to install and exits 2, before anything imports them.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from groupcoord import errors
from groupcoord.addresses import unresolved_hosts
from groupcoord.admin import AdminClient
from groupcoord.channels import ClientSecurity
from groupcoord.cli.common import STATS_EXTRA_HINT, client_security, missing_stats_extra
from groupcoord.wire import snapshot_to_pb

__all__ = ["duration_s", "listen_address", "publish_snapshots", "run_stats", "spark_setting"]

log = logging.getLogger("groupcoord.cli.stats")

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str) -> float:
    """argparse type: ``60``, ``60s``, ``2m`` or ``1h`` as seconds (> 0)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([smh]?)\s*", text)
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration > 0 (e.g. 60s, 2m)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def spark_setting(text: str) -> tuple[str, str]:
    """argparse type: ``KEY=VALUE`` (a Spark setting, as spark-submit's ``--conf``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. spark.executor.memory=2g)")
    return key.strip(), value


def listen_address(text: str) -> str:
    """argparse type: ``HOST:PORT`` (port 0..65535; 0 picks a free one), the host one that resolves."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT with a port from 0 to 65535 "
                                          "(e.g. 127.0.0.1:9402)")
    if host.strip("[]") not in ("", "0.0.0.0", "::"):
        unresolved = unresolved_hosts([text])
        if unresolved:
            raise argparse.ArgumentTypeError(f"{text}: {unresolved[text]}")
    return text


def publish_snapshots(out: str, coordinator: str, security: ClientSecurity | None = None,
                      attempts: int = 1) -> list[str]:
    """Send every group's snapshot under ``out`` to the coordinator; returns the group ids sent.

    ``attempts`` > 1: an unreachable coordinator is tried again (exponential backoff 0.5 s to
    5 s) before its ``CoordinatorNotAvailableError`` is raised; a snapshot sent twice replaces
    itself, so a retry never counts anything twice.
    """
    for attempt in Retrying(stop=stop_after_attempt(attempts), wait=wait_exponential(multiplier=0.5, max=5),
                            retry=retry_if_exception_type(errors.CoordinatorMovedError), reraise=True):
        with attempt:
            return _publish_once(out, coordinator, security)
    raise AssertionError("unreachable: Retrying either returns or raises")


def _publish_once(out: str, coordinator: str, security: ClientSecurity | None) -> list[str]:
    from groupcoord.loadstats.snapshot_io import read_snapshots  # lazy: reads Parquet with pyarrow (the stats extra)

    sent = []
    with AdminClient(coordinator, security=security) as admin:
        for group_id, snapshot in sorted(read_snapshots(out).items()):
            try:
                admin.publish_load_snapshot(snapshot_to_pb(snapshot))
            except errors.GroupIdNotFoundError:
                print(f"groupcoord stats: group {group_id!r} is unknown to the coordinator; not published",
                      file=sys.stderr)
                continue
            sent.append(group_id)
    return sent


def _line(snapshot_id: str, out: str, meta: Any) -> str:
    rejected = ", ".join(f"{k}={v}" for k, v in meta["rows_rejected"].items() if v) or "none"
    return (f"snapshot {snapshot_id} -> {out}: {meta['rows_read']} rows read (rejected: {rejected}; repeats counted "
            f"once: {meta['rows_duplicate']}), {meta['groups']} group(s), {meta['tasks']} task(s), "
            f"{meta['workers']} worker(s), {meta['split_candidates']} split candidate(s)")


_ROLL_NOTE = ("the coordinator's sample log makes its files visible when it rolls them (every minute, and when "
              "it stops)")


def _no_sample_file_yet(samples: str) -> bool:
    """A local samples directory with no visible file in it yet (only the hidden in-progress one): said
    in one line without starting Spark, whose Parquet reader would print a warning and a Java stack
    trace first. Other paths (hdfs://, s3a://) and missing ones are left to the job."""
    path = Path(samples.removeprefix("file://"))
    if "://" in samples.removeprefix("file://") or not path.is_dir():
        return False
    return not any(p.is_file() and not p.name.startswith((".", "_")) for p in path.rglob("*"))


def run_stats(args: argparse.Namespace) -> int:
    missing = missing_stats_extra()
    if missing is not None:
        print(f"groupcoord stats: needs PySpark and pyarrow ({missing} is not installed): {STATS_EXTRA_HINT}",
              file=sys.stderr)
        return 2
    if args.full and (args.follow or args.reset):
        print("groupcoord stats: --full rebuilds from the whole log; it takes neither --follow nor --reset",
              file=sys.stderr)
        return 2
    if args.metrics_listen and not args.follow:
        print("groupcoord stats: --metrics-listen serves the metrics of --follow; add --follow", file=sys.stderr)
        return 2
    if not args.follow and _no_sample_file_yet(args.samples):
        print(f"groupcoord stats: no samples under {args.samples} yet: {_ROLL_NOTE}", file=sys.stderr)
        return 0
    # lazy: the Spark job needs pyspark and pyarrow (the stats extra)
    from groupcoord.loadstats.job import run
    from groupcoord.loadstats.stream import run_incremental

    common = {"master": args.master, "short_samples": args.short_samples, "long_samples": args.long_samples,
              "max_sample_age_s": args.max_sample_age_s, "spark_conf": dict(args.conf)}

    try:
        if args.full:
            result = run(args.samples, args.out, state_path=args.state, **common)  # the state's archive, if any
        elif args.follow:
            return _follow(args, common)
        else:
            result = run_incremental(args.samples, args.out, state_path=args.state, reset=args.reset, **common)
    except (FileNotFoundError, ValueError) as error:
        print(f"groupcoord stats: {error}", file=sys.stderr)
        return 2
    meta = {"rows_read": result.rows_read, "rows_rejected": result.rows_rejected,
            "rows_duplicate": result.rows_duplicate, "groups": result.groups, "tasks": result.tasks,
            "workers": result.workers, "split_candidates": result.split_candidates}
    timing = f"{result.wall_time_s:.1f}s"
    mode = "full rebuild"
    if result.extra.get("mode") == "incremental":
        start = float(result.extra.get("session_start_s", 0.0))
        timing = f"{result.wall_time_s - start:.1f}s + {start:.1f}s Spark start"
        mode = (f"incremental: {result.extra['rows_new']} new row(s) in {result.extra['batches']} batch(es), "
                f"late {result.extra['rows_late_new']}")
    print(_line(result.snapshot_id, args.out, meta) + f", {timing} ({mode})")
    if result.rows_read == 0:
        print(f"groupcoord stats: no samples under {args.samples} yet: {_ROLL_NOTE}", file=sys.stderr)
    if args.coordinator:
        sent = publish_snapshots(args.out, args.coordinator, client_security(args, args.coordinator))
        print(f"published to {args.coordinator}: {', '.join(sent) or 'nothing'}")
    return 0


def _follow(args: argparse.Namespace, common: dict[str, Any]) -> int:
    """``--follow``: the service (``loadstats.follow``), its metrics endpoint and the bounded publish."""
    from groupcoord.coordinator.runtime.metrics import serve_metrics
    from groupcoord.loadstats.follow import follow
    from groupcoord.loadstats.follow_metrics import FollowMetrics

    metrics = FollowMetrics(CollectorRegistry())
    endpoint = None
    if args.metrics_listen:
        try:
            endpoint = serve_metrics(metrics.registry, args.metrics_listen)
        except OSError as error:
            print(f"groupcoord stats: cannot serve metrics on {args.metrics_listen}: {error}", file=sys.stderr)
            return 2

    def published(meta: dict[str, Any]) -> None:  # one line (and one publish) per snapshot
        print(_line(meta["snapshot_id"], args.out, meta) + f" (new rows: state batch {meta['state_batch_id']})",
              flush=True)
        if not args.coordinator:
            return
        try:
            sent = publish_snapshots(args.out, args.coordinator, client_security(args, args.coordinator),
                                     attempts=args.publish_attempts)
        except errors.GroupCoordError as error:  # the next refresh publishes again (its snapshot is newer)
            log.error("publish failed (publish): %s after %d attempt(s); the next refresh publishes again",
                      error, args.publish_attempts)
            metrics.failed("publish")
            return
        metrics.published(len(sent))
        print(f"published to {args.coordinator}: {', '.join(sent) or 'nothing'}", flush=True)

    where = f", metrics on http://{args.metrics_listen.rpartition(':')[0]}:{endpoint.port}/metrics" if endpoint else ""
    print(f"groupcoord stats: following {args.samples} every {args.every:g}s{where} (SIGTERM or Ctrl-C stops)",
          flush=True)
    try:
        follow(args.samples, args.out, every_s=args.every, state_path=args.state, reset=args.reset,
               on_snapshot=published, metrics=metrics, **common)
    finally:
        if endpoint is not None:
            endpoint.close()
    print("groupcoord stats: stopped", flush=True)
    return 0
