"""The ``groupcoord`` command line's parser: one function per command, the flags Kafka users reach for
answered with ours, one readable line for a usage error (``cli.main`` runs what it parses)."""

from __future__ import annotations

import argparse
import importlib.metadata
from typing import Any, NoReturn

from groupcoord.addresses import parse_addresses
from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.cli.common import (
    DEFAULT_LISTEN,
    add_client_security,
    add_coordinator,
    add_group,
    coordinator_addresses,
    non_negative_float,
    positive_int,
)
from groupcoord.cli.stats import duration_s, listen_address, spark_setting

_DESCRIPTION = "run the coordinator, a demo worker, admin and stats commands"
_LOG_LEVELS = ["debug", "info", "warning", "error"]
GROUP_STORY = ("groupcoord.coordinator", "groupcoord.runtime")  # serve's loggers at info unless --log-level says
_KAFKA_FLAGS = {"--bootstrap-server": "--coordinator HOST:PORT[,...] (or $GROUPCOORD_COORDINATOR)",
                "--bootstrap-servers": "--coordinator HOST:PORT[,...] (or $GROUPCOORD_COORDINATOR)"}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the usage is one ``--help`` away) and a hint for Kafka's flag names."""

    def error(self, message: str) -> NoReturn:
        for flag, ours in _KAFKA_FLAGS.items():
            if flag in message:
                message = f"{flag} is Kafka's name for it: here write {ours}"
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.HelpFormatter):
    """Every flag's help line ends with its default, unless it says it already or has none worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default is argparse.SUPPRESS or not action.option_strings:
            return text
        if action.nargs == 0 or action.required:  # a switch (off unless given), or a flag that must be given
            return text
        if action.default in (None, [], ""):
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"


def _global_flags(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """The flags every command takes, before or after its name (a command's own copy sets nothing
    unless given, so ``groupcoord --log-level debug serve`` keeps the value given first)."""
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument("--log-level", choices=_LOG_LEVELS, default=default,
                        help="what reaches stderr (default: warning; serve: the groups' events at info too)")
    parser.add_argument("--log-format", choices=["text", "json"], default=default,
                        help="json: one JSON object per line (default: text, or serve's config file)")


def _command(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text,
                                                     formatter_class=_HelpFormatter)
    _global_flags(parser)
    return parser


def _actions(parser: argparse.ArgumentParser, dest: str) -> Any:
    return parser.add_subparsers(dest=dest, required=True, metavar="ACTION", parser_class=_Parser)


def _one_address(text: str) -> str:
    """argparse type: one ``HOST:PORT``, port 1-65535 (the host as clients name it: not resolved here)."""
    try:
        (address,) = parse_addresses(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error) if "," not in text else f"{text!r} is one HOST:PORT") from None
    return address


def _add_serve(sub: Any) -> None:
    serve = _command(sub, "serve", "run the coordinator")
    serve.add_argument("--listen", type=listen_address,
                       help=f"HOST:PORT to listen on; port 0 picks a free one (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help="where group metadata and load samples live (default ./groupcoord-data)")
    serve.add_argument("--config", help="TOML file with [server] and [coordinator] sections (flags override it)")
    serve.add_argument("--store", choices=["sqlite", "memory", "zookeeper"], help="group store (default sqlite)")
    serve.add_argument("--zk", help="ZooKeeper HOST:PORT[,HOST:PORT...] for --store zookeeper (default: none)")
    serve.add_argument("--advertise", type=_one_address, help="HOST:PORT other coordinators and workers reach this "
                                                              "one at (default: --listen)")
    serve.add_argument("--sharded", action="store_true", default=None,
                       help="with --store zookeeper: groups spread over every coordinator on the same --zk-root, "
                            "by shard (default: active/standby, one coordinator holds every group)")
    serve.add_argument("--shards", type=positive_int,
                       help="shards of a sharded cluster (implies --sharded; default 64; fixed at the first start)")
    serve.add_argument("--zk-root", help="the cluster's ZooKeeper path (default /groupcoord/default)")
    serve.add_argument("--zk-session-timeout-s", type=float, help="ZooKeeper session timeout (default 10)")
    serve.add_argument("--initial-rebalance-delay-ms", type=int,
                       help="how long a new group waits for more members before its first rebalance "
                            "(group_initial_rebalance_delay_ms; default 3000)")
    serve.add_argument("--snapshots", help="a load snapshot path (the --out of `groupcoord stats` or the job) to "
                                           "pick up new snapshots from (default: none)")
    serve.add_argument("--snapshot-poll-s", type=float, help="how often to look at --snapshots (default 10)")
    serve.add_argument("--sample-retention-s", type=non_negative_float,
                       help="drop sample log files older than this (default 604800 = 7 days; 0: no age limit)")
    serve.add_argument("--sample-retention-bytes", type=int,
                       help="drop the oldest sample log files beyond this total (default 10 GiB; 0: no limit)")
    _add_serve_security(serve)
    serve.add_argument("--print-config", nargs="?", const="toml", choices=["toml", "json"],
                       help="print the effective configuration (file, flags and defaults; secrets masked) and exit")
    serve.add_argument("--metrics-listen", metavar="HOST:PORT", type=listen_address,
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)")
    serve.add_argument("--metrics-public", action="store_true", default=None,
                       help="serve /metrics beyond loopback without a scraper credential (refused otherwise)")
    serve.add_argument("--metrics-token-file", metavar="FILE",
                       help="scrapers of /metrics must send a bearer token listed here ('NAME sha256:HEX' lines)")


def _add_serve_security(serve: argparse.ArgumentParser) -> None:
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
    serve.add_argument("--zk-tls-key", metavar="PEM", help="the ZooKeeper client certificate's private key")
    serve.add_argument("--zk-trust-existing", action="store_true", default=None,
                       help="start even if znodes under --zk-root can be changed by others than the coordinators' "
                            "--zk-auth identity (checked by hand)")


def _add_worker(sub: Any) -> None:
    worker = _command(sub, "worker", "run a demo worker that prints one JSON line per event")
    add_group(worker, positional=False)
    add_coordinator(worker)
    worker.add_argument("--name", default="worker", help="client id (prefix of the member id)")
    worker.add_argument("--session-timeout-ms", type=positive_int, default=10_000,
                        help="the coordinator removes the worker after this long without a heartbeat")
    worker.add_argument("--heartbeat-interval-ms", type=positive_int, default=3_000,
                        help="time between heartbeats (below a third of the session timeout)")
    worker.add_argument("--rebalance-timeout-ms", type=positive_int, default=60_000,
                        help="how long a rebalance waits for this worker to re-join")
    worker.add_argument("--protocol", default="classic",
                        help="group protocol: classic (default; JoinGroup/SyncGroup, a leader worker assigns) or consumer "
                             "(one GroupHeartbeat, the coordinator assigns, no group-wide barrier)")
    worker.add_argument("--assignor", default="round-robin",
                        help="assignor name(s) this worker supports, most preferred first (comma-separated)")
    worker.add_argument("--server-assignor", default="",
                        help="with --protocol consumer: the assignor this worker asks for, by name (the group runs "
                             "the one most members name; none named: the coordinator's default, sticky); "
                             "client:NAME runs NAME on the group's "
                             "leader worker instead")
    worker.add_argument("--rack", default="", help="the worker's rack, for rack-aware assignors (default: none)")
    worker.add_argument("--pool", default="", help="the worker's resource pool: it gets only that pool's tasks "
                                                   "(default: none)")
    worker.add_argument("--capacity", type=float, default=1.0, help="relative capacity, for weighted assignors")
    worker.add_argument("--report-load", action="store_true",
                        help="report this process's load (psutil) and synthetic per-task rates")
    worker.add_argument("--instance-id", default="",
                        help="static membership: a name that survives restarts (restarted within the session "
                             "timeout, the worker gets its tasks back without a rebalance)")
    worker.add_argument("--rebalance-protocol", choices=[p.value for p in RebalanceProtocol], default=RebalanceProtocol.EAGER.value,
                        help="cooperative: only the tasks that move stop (when every member offers it)")
    worker.add_argument("--leave-on-exit", action="store_true",
                        help="with --instance-id: leave the group on exit (a scale-in) instead of letting the "
                             "session timeout decide")
    add_client_security(worker)


def _admin_command(actions: Any, name: str, help_text: str, *, group: bool = True) -> argparse.ArgumentParser:
    """An admin command: ``--coordinator``, the security flags, and (``group``) ``--group``."""
    parser = _command(actions, name, help_text)
    if group:
        add_group(parser, positional=True)
    add_coordinator(parser)
    add_client_security(parser)
    return parser


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (one document) instead of a table")


def _add_groups(sub: Any) -> None:
    groups = _command(sub, "groups", "list, describe, plan or remove members of groups")
    actions = _actions(groups, "groups_command")
    listing = _admin_command(actions, "list", "every group with its state (of every coordinator of a cluster)",
                             group=False)
    _json_flag(listing)
    describe = _admin_command(actions, "describe", "one group: members, assignment, tasks")
    _json_flag(describe)
    describe.add_argument("--wide", action="store_true", help="full member ids, whatever the terminal's width")
    plan = _admin_command(actions, "plan", "dry run: what an assignor would do with the group now")
    plan.add_argument("--assignor", help="the assignor to run (default: the group's current one)")
    plan.add_argument("--snapshot", metavar="PATH", help="use the load snapshot at PATH (a `groupcoord stats "
                                                         "--out` directory) instead of the coordinator's")
    _json_flag(plan)
    remove = _admin_command(actions, "remove-members", "remove members in one batch (static ones by instance id)")
    remove.add_argument("--instance-id", action="append", default=[], metavar="ID", dest="instance_ids",
                        help="a static member's instance id (repeat for several)")
    remove.add_argument("--member-id", action="append", default=[], metavar="ID", dest="member_ids",
                        help="a member id (repeat for several)")
    _json_flag(remove)


def _add_cluster(sub: Any) -> None:
    cluster = _command(sub, "cluster", "the coordinators and shards of a cluster")
    actions = _actions(cluster, "cluster_command")
    describe = _admin_command(actions, "describe", "coordinators, shards (leader, epoch, groups, members) and moves "
                                                   "in progress", group=False)
    _json_flag(describe)


def _add_tasks(sub: Any) -> None:
    tasks = _command(sub, "tasks", "edit a group's task catalog")
    actions = _actions(tasks, "tasks_command")
    put = _admin_command(actions, "put", "add or replace tasks", group=False)
    add_group(put, positional=False)
    put.add_argument("task_ids", nargs="+", metavar="TASK", help="the task ids")
    put.add_argument("--replicas", type=positive_int, default=1, help="replicas of each task, on distinct members")
    put.add_argument("--pool", default="", help="the resource pool whose members run the tasks (default: any)")
    put.add_argument("--weight", type=float, default=1.0, help="each task's weight, for weighted assignors")
    delete = _admin_command(actions, "delete", "remove tasks", group=False)
    add_group(delete, positional=False)
    delete.add_argument("task_ids", nargs="+", metavar="TASK", help="the task ids")


def _add_stats(sub: Any) -> None:
    stats = _command(sub, "stats", "run the load statistics Spark job")
    stats.add_argument("--samples", required=True, help="sample log directory (Parquet or JSON Lines)")
    stats.add_argument("--out", required=True, help="where the snapshot is written")
    stats.add_argument("--master", default="local[*]",
                       help="Spark master: local[*], or a cluster's (spark://HOST:7077, yarn, k8s://...)")
    stats.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", type=spark_setting,
                       help="a Spark setting for the session, as spark-submit's --conf (repeatable), "
                            "e.g. spark.executor.memory=2g")
    stats.add_argument("--coordinator", type=coordinator_addresses, metavar="HOST:PORT[,...]",
                       help="publish the snapshot to this cluster's coordinators (default: not published)")
    add_client_security(stats)
    stats.add_argument("--short-samples", type=positive_int, default=10,
                       help="samples in the short-term time averages")
    stats.add_argument("--long-samples", type=positive_int, default=1000,
                       help="samples in the long-term time averages")
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


def _add_demo(sub: Any) -> None:
    demo = _command(sub, "demo", "coordinator + workers: form, rebalance, lose a worker")
    demo.add_argument("--workers", type=positive_int, default=3, help="demo workers to start")
    demo.add_argument("--tasks", type=positive_int, default=8, help="tasks in the demo group")
    demo.add_argument("--data-dir", help="default: a temporary directory")
    demo.add_argument("--skip-stats", action="store_true", help="skip the Spark load statistics part")
    demo.add_argument("--plot", metavar="PATH", help="act two's PNG (default: groupcoord-demo-load.png in the data "
                      "directory, or the temp directory)")
    demo.add_argument("--console", action="store_true", help="keep the web console open at the end (Ctrl-C ends)")


def _version() -> str:
    """``groupcoord.__version__`` as the installed package's metadata carries it (pyproject reads it
    from there; the roof must not import the facade, ``tests/test_architecture.py``)."""
    try:
        return importlib.metadata.version("groupcoord")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    """The ``groupcoord`` parser: one function per command."""
    parser = _Parser(prog="groupcoord", description=_DESCRIPTION, formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"groupcoord {_version()}",
                        help="print the version and exit")
    _global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_serve(sub)
    _add_worker(sub)
    _add_groups(sub)
    _add_cluster(sub)
    _add_tasks(sub)
    _add_stats(sub)
    _add_demo(sub)
    _add_console(sub)
    return parser


def _add_console(sub: Any) -> None:
    from groupcoord.cli.console import add_console_flags

    add_console_flags(_command(sub, "console", "a web console: the cluster, every group, members and load, live"))
