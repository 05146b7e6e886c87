"""The ``groupcoord`` command: run the coordinator, a demo worker, admin and stats commands.

Every failure is one readable line on stderr and a non-zero exit status
(1: the coordinator refused or could not be reached; 2: bad command line or
config); tracebacks go to the log only with ``--log-level debug``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from groupcoord import errors
from groupcoord.cli.cluster import run_cluster
from groupcoord.cli.common import DEFAULT_LISTEN, UsageError, add_client_security, non_negative_float, positive_int
from groupcoord.cli.console import add_console_parser, run_console_command
from groupcoord.cli.console_worker import run_worker
from groupcoord.cli.groups import run_groups, run_tasks
from groupcoord.cli.logs import TextFormatter, use_log_format
from groupcoord.cli.stats import duration_s, listen_address, run_stats, spark_setting
from groupcoord.coordinator.process.print_config import render_options
from groupcoord.coordinator.process.serve import ServeOptions, run_coordinator

__all__ = ["main"]

log = logging.getLogger("groupcoord.cli")

_DESCRIPTION = "run the coordinator, a demo worker, admin and stats commands"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupcoord", description=_DESCRIPTION)
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the coordinator")
    serve.add_argument("--listen", help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help="where group metadata and load samples live (default ./groupcoord-data)")
    serve.add_argument("--config", help="TOML file with [server] and [coordinator] sections")
    serve.add_argument("--store", choices=["sqlite", "memory", "zookeeper"], help="group store (default sqlite)")
    serve.add_argument("--zk", help="ZooKeeper HOST:PORT[,HOST:PORT...] for --store zookeeper")
    serve.add_argument("--advertise", help="HOST:PORT other coordinators and workers reach this one at")
    serve.add_argument("--sharded", action="store_true", default=None,
                       help="with --store zookeeper: groups spread over every coordinator on the same --zk-root, "
                            "by shard (default: active/standby, one coordinator holds every group)")
    serve.add_argument("--shards", type=positive_int,
                       help="shards of a sharded cluster (implies --sharded; default 64; fixed at the first start)")
    serve.add_argument("--zk-root", help="the cluster's ZooKeeper path (default /groupcoord/default)")
    serve.add_argument("--zk-session-timeout-s", type=float, help="ZooKeeper session timeout (default 10)")
    serve.add_argument("--initial-rebalance-delay-ms", type=int, help="group_initial_rebalance_delay_ms")
    serve.add_argument("--snapshots", help="a load snapshot path (the --out of `groupcoord stats` or the job) to "
                                           "pick up new snapshots from")
    serve.add_argument("--snapshot-poll-s", type=float, help="how often to look at --snapshots (default 10)")
    serve.add_argument("--sample-retention-s", type=non_negative_float,
                       help="drop sample log files older than this (default 604800 = 7 days; 0: no age limit)")
    serve.add_argument("--sample-retention-bytes", type=int,
                       help="drop the oldest sample log files beyond this total (default 10 GiB; 0: no limit)")
    serve.add_argument("--tls-cert", metavar="PEM", help="server certificate (TLS for every service; with --tls-key)")
    serve.add_argument("--tls-key", metavar="PEM", help="the server certificate's private key")
    serve.add_argument("--tls-client-ca", metavar="PEM",
                       help="require client certificates signed by this CA (mTLS); a certificate's subject is the "
                            "client's principal")
    serve.add_argument("--token-file", metavar="FILE",
                       help="bearer tokens, one 'NAME sha256:HEX' line each (reloaded on SIGHUP)")
    serve.add_argument("--acl-file", metavar="TOML", help="per-group ACLs (reloaded on SIGHUP; none: all allowed)")
    serve.add_argument("--zk-auth", choices=["digest", "sasl"], help="authenticate to ZooKeeper (and put ACLs "
                                                                    "on the znodes); with --zk-credentials-file")
    serve.add_argument("--zk-credentials-file", metavar="FILE", help="one line USER:PASSWORD for --zk-auth")
    serve.add_argument("--zk-tls-ca", metavar="PEM", help="TLS to ZooKeeper: the CA of its certificate")
    serve.add_argument("--zk-tls-cert", metavar="PEM", help="client certificate for ZooKeeper (with --zk-tls-key)")
    serve.add_argument("--zk-tls-key", metavar="PEM")
    serve.add_argument("--zk-trust-existing", action="store_true", default=None,
                       help="start even if znodes under --zk-root can be changed by others than the coordinators' "
                            "--zk-auth identity (checked by hand)")
    serve.add_argument("--print-config", nargs="?", const="toml", choices=["toml", "json"],
                       help="print the effective configuration (file, flags and defaults; secrets masked) and exit")
    serve.add_argument("--metrics-listen", metavar="HOST:PORT",
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)")
    serve.add_argument("--metrics-public", action="store_true", default=None,
                       help="serve /metrics beyond loopback without a scraper credential (refused otherwise)")
    serve.add_argument("--metrics-token-file", metavar="FILE",
                       help="scrapers of /metrics must send a bearer token listed here ('NAME sha256:HEX' lines)")
    serve.add_argument("--log-format", choices=["text", "json"], help="json: one JSON object per line (default text)")

    worker = sub.add_parser("worker", help="run a demo worker that prints one JSON line per event")
    worker.add_argument("--group", required=True)
    worker.add_argument("--coordinator", required=True, help="HOST:PORT[,HOST:PORT...]")
    worker.add_argument("--name", default="worker", help="client id (prefix of the member id)")
    worker.add_argument("--session-timeout-ms", type=positive_int, default=10_000)
    worker.add_argument("--heartbeat-interval-ms", type=positive_int, default=3_000)
    worker.add_argument("--rebalance-timeout-ms", type=positive_int, default=60_000)
    worker.add_argument("--assignor", default="round-robin",
                        help="assignor name(s) this worker supports, most preferred first (comma-separated)")
    worker.add_argument("--rack", default="")
    worker.add_argument("--pool", default="")
    worker.add_argument("--capacity", type=float, default=1.0)
    worker.add_argument("--report-load", action="store_true",
                        help="report this process's load (psutil) and synthetic per-task rates")
    worker.add_argument("--instance-id", default="",
                        help="static membership: a name that survives restarts (restarted within the session "
                             "timeout, the worker gets its tasks back without a rebalance)")
    worker.add_argument("--rebalance-protocol", choices=["eager", "cooperative"], default="eager",
                        help="cooperative: only the tasks that move stop (when every member offers it)")
    worker.add_argument("--leave-on-exit", action="store_true",
                        help="with --instance-id: leave the group on exit (a scale-in) instead of letting the "
                             "session timeout decide")
    add_client_security(worker)

    groups = sub.add_parser("groups", help="list, describe, plan or remove members of groups")
    groups_sub = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    listing = groups_sub.add_parser("list", help="every group with its state (of every coordinator of a cluster)")
    listing.add_argument("--coordinator", default=DEFAULT_LISTEN, help="HOST:PORT[,HOST:PORT...]: any coordinators "
                         "of the cluster (default %(default)s)")
    add_client_security(listing)
    listing.add_argument("--json", action="store_true")
    describe = groups_sub.add_parser("describe", help="one group: members, assignment, tasks")
    describe.add_argument("group")
    describe.add_argument("--coordinator", default=DEFAULT_LISTEN)
    add_client_security(describe)
    describe.add_argument("--json", action="store_true")
    describe.add_argument("--wide", action="store_true", help="full member ids, whatever the terminal's width")
    plan = groups_sub.add_parser("plan", help="dry run: what an assignor would do with the group now")
    plan.add_argument("group")
    plan.add_argument("--assignor", help="the assignor to run (default: the group's current one)")
    plan.add_argument("--snapshot", metavar="PATH", help="use the load snapshot at PATH (a `groupcoord stats "
                                                         "--out` directory) instead of the coordinator's")
    plan.add_argument("--coordinator", default=DEFAULT_LISTEN)
    add_client_security(plan)
    plan.add_argument("--json", action="store_true")
    remove = groups_sub.add_parser("remove-members", help="remove members in one batch (static ones by instance id)")
    remove.add_argument("group")
    remove.add_argument("--instance-id", action="append", default=[], metavar="ID", dest="instance_ids",
                        help="a static member's instance id (repeat for several)")
    remove.add_argument("--member-id", action="append", default=[], metavar="ID", dest="member_ids",
                        help="a member id (repeat for several)")
    remove.add_argument("--coordinator", default=DEFAULT_LISTEN)
    add_client_security(remove)
    remove.add_argument("--json", action="store_true")

    cluster = sub.add_parser("cluster", help="the coordinators and shards of a cluster")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    cluster_describe = cluster_sub.add_parser("describe", help="coordinators, shards (leader, epoch, groups, "
                                                               "members) and moves in progress")
    cluster_describe.add_argument("--coordinator", default=DEFAULT_LISTEN,
                                  help="HOST:PORT[,HOST:PORT...]: any coordinators of the cluster (default %(default)s)")
    add_client_security(cluster_describe)
    cluster_describe.add_argument("--json", action="store_true")

    tasks = sub.add_parser("tasks", help="edit a group's task catalog")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    put = tasks_sub.add_parser("put", help="add or replace tasks")
    put.add_argument("group")
    put.add_argument("task_ids", nargs="+", metavar="TASK")
    put.add_argument("--replicas", type=positive_int, default=1)
    put.add_argument("--pool", default="")
    put.add_argument("--weight", type=float, default=1.0)
    put.add_argument("--coordinator", default=DEFAULT_LISTEN)
    add_client_security(put)
    delete = tasks_sub.add_parser("delete", help="remove tasks")
    delete.add_argument("group")
    delete.add_argument("task_ids", nargs="+", metavar="TASK")
    delete.add_argument("--coordinator", default=DEFAULT_LISTEN)
    add_client_security(delete)

    stats = sub.add_parser("stats", help="run the load statistics Spark job")
    stats.add_argument("--samples", required=True, help="sample log directory (Parquet or JSON Lines)")
    stats.add_argument("--out", required=True, help="where the snapshot is written")
    stats.add_argument("--master", default="local[*]",
                       help="Spark master: local[*], or a cluster's (spark://HOST:7077, yarn, k8s://...)")
    stats.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", type=spark_setting,
                       help="a Spark setting for the session, as spark-submit's --conf (repeatable), "
                            "e.g. spark.executor.memory=2g")
    stats.add_argument("--coordinator", help="publish the snapshot to this coordinator")
    add_client_security(stats)
    stats.add_argument("--short-samples", type=positive_int, default=10)
    stats.add_argument("--long-samples", type=positive_int, default=1000)
    stats.add_argument("--max-sample-age-s", type=non_negative_float, default=1800.0,
                       help="leave out workers and tasks silent this long behind their group's newest report "
                            "(default 1800 = two of the 15 min maximum report interval; 0 keeps all)")
    stats.add_argument("--full", action="store_true",
                       help="rebuild from the whole sample log instead of folding in only the new files")
    stats.add_argument("--follow", action="store_true",
                       help="keep running in one warm Spark session; a snapshot per --every when files arrived")
    stats.add_argument("--every", type=duration_s, default=60.0, help="--follow interval (default 60s; 2m, 1h)")
    stats.add_argument("--metrics-listen", metavar="HOST:PORT", type=listen_address,
                       help="--follow: serve Prometheus metrics at http://HOST:PORT/metrics (default: off)")
    stats.add_argument("--publish-attempts", type=positive_int, default=4,
                       help="--coordinator: tries per snapshot before the publish is counted failed and left to "
                            "the next refresh (default 4, backing off 0.5 s to 5 s)")
    stats.add_argument("--state", help="the incremental state and Spark checkpoint (default OUT.state)")
    stats.add_argument("--reset", action="store_true",
                       help="forget the incremental state first (the next run reads the whole log)")

    demo = sub.add_parser("demo", help="coordinator + workers: form, rebalance, lose a worker")
    demo.add_argument("--workers", type=positive_int, default=3)
    demo.add_argument("--tasks", type=positive_int, default=8)
    demo.add_argument("--data-dir", help="default: a temporary directory")
    demo.add_argument("--skip-stats", action="store_true", help="skip the Spark load statistics part")
    demo.add_argument("--plot", metavar="PATH", help="act two's PNG (default: groupcoord-demo-load.png in the data "
                      "directory, or the temp directory)")
    demo.add_argument("--console", action="store_true", help="keep the web console open at the end (Ctrl-C ends)")
    add_console_parser(sub)
    return parser


def _run_serve(args: argparse.Namespace) -> int:
    try:
        options = ServeOptions.from_args(args)
        if args.print_config:
            print(render_options(options, args.print_config), end="")
            return 0
        use_log_format(options.log_format)
        return run_coordinator(options)
    except ValueError as error:  # bad config, unusable data dir or store file, port in use
        raise UsageError(str(error)) from None


def _run_demo(args: argparse.Namespace) -> int:
    # lazy: the demo loads loadstats' sample log and runs the Spark job (pyarrow, pyspark: the stats extra);
    # every other command must work without them
    from groupcoord.cli.demo import run_demo

    return run_demo(workers=args.workers, tasks=args.tasks, data_dir=args.data_dir, with_stats=not args.skip_stats,
                    plot=args.plot, console=args.console)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _run_serve, "worker": run_worker, "groups": run_groups, "tasks": run_tasks, "stats": run_stats,
    "demo": _run_demo, "cluster": run_cluster, "console": run_console_command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``groupcoord`` command; returns its exit status (0, 1 refused/unreachable, 2 usage)."""
    parser = _parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter())
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), handlers=[handler])
    if args.log_level != "debug":
        logging.getLogger("transitions").setLevel(logging.WARNING)
    try:
        return _COMMANDS[args.command](args)
    except UsageError as error:
        print(f"groupcoord {args.command}: {error}", file=sys.stderr)
        return 2
    except errors.GroupCoordError as error:
        print(f"groupcoord {args.command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # the last line of defence: one line, details in the debug log
        log.debug("unexpected failure", exc_info=True)
        print(f"groupcoord {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1

