"""The ``groupcoord`` command: run the coordinator, a demo worker, admin and stats commands.

Every failure is one readable line on stderr and a non-zero exit status
(1: the coordinator refused or could not be reached; 2: bad command line or
config); tracebacks go to the log only with ``--log-level debug``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from typing import Any, Sequence

from groupcoord import errors
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["main"]

DEFAULT_LISTEN = "127.0.0.1:9400"
log = logging.getLogger("groupcoord.cli")


class UsageError(Exception):
    """Bad flags or config: exit status 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupcoord", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the coordinator")
    serve.add_argument("--listen", help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN})")
    serve.add_argument("--data-dir", help="where group metadata and load samples live (default ./groupcoord-data)")
    serve.add_argument("--config", help="TOML file with [server] and [coordinator] sections")
    serve.add_argument("--store", choices=["sqlite", "memory", "zookeeper"], help="group store (default sqlite)")
    serve.add_argument("--zk", help="ZooKeeper HOST:PORT[,HOST:PORT...] for --store zookeeper")
    serve.add_argument("--advertise", help="HOST:PORT other coordinators and workers reach this one at")
    serve.add_argument("--initial-rebalance-delay-ms", type=int, help="group_initial_rebalance_delay_ms")
    serve.add_argument("--snapshots", help="a load snapshot path (the --out of `groupcoord stats` or the job) to "
                                           "pick up new snapshots from")
    serve.add_argument("--snapshot-poll-s", type=float, help="how often to look at --snapshots (default 10)")

    worker = sub.add_parser("worker", help="run a demo worker that prints one JSON line per event")
    worker.add_argument("--group", required=True)
    worker.add_argument("--coordinator", required=True, help="HOST:PORT[,HOST:PORT...]")
    worker.add_argument("--name", default="worker", help="client id (prefix of the member id)")
    worker.add_argument("--session-timeout-ms", type=_positive_int, default=10_000)
    worker.add_argument("--heartbeat-interval-ms", type=_positive_int, default=3_000)
    worker.add_argument("--rebalance-timeout-ms", type=_positive_int, default=60_000)
    worker.add_argument("--assignor", default="round-robin",
                        help="assignor name(s) this worker supports, most preferred first (comma-separated)")
    worker.add_argument("--rack", default="")
    worker.add_argument("--pool", default="")
    worker.add_argument("--capacity", type=float, default=1.0)
    worker.add_argument("--report-load", action="store_true",
                        help="report this process's load (psutil) and synthetic per-task rates")

    groups = sub.add_parser("groups", help="list or describe groups")
    groups_sub = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    listing = groups_sub.add_parser("list", help="every group with its state")
    listing.add_argument("--coordinator", default=DEFAULT_LISTEN)
    listing.add_argument("--json", action="store_true")
    describe = groups_sub.add_parser("describe", help="one group: members, assignment, tasks")
    describe.add_argument("group")
    describe.add_argument("--coordinator", default=DEFAULT_LISTEN)
    describe.add_argument("--json", action="store_true")

    tasks = sub.add_parser("tasks", help="edit a group's task catalog")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    put = tasks_sub.add_parser("put", help="add or replace tasks")
    put.add_argument("group")
    put.add_argument("task_ids", nargs="+", metavar="TASK")
    put.add_argument("--replicas", type=_positive_int, default=1)
    put.add_argument("--pool", default="")
    put.add_argument("--weight", type=float, default=1.0)
    put.add_argument("--coordinator", default=DEFAULT_LISTEN)
    delete = tasks_sub.add_parser("delete", help="remove tasks")
    delete.add_argument("group")
    delete.add_argument("task_ids", nargs="+", metavar="TASK")
    delete.add_argument("--coordinator", default=DEFAULT_LISTEN)

    stats = sub.add_parser("stats", help="run the load statistics Spark job")
    stats.add_argument("--samples", required=True, help="sample log directory (Parquet or JSON Lines)")
    stats.add_argument("--out", required=True, help="where the snapshot is written")
    stats.add_argument("--master", default="local[*]")
    stats.add_argument("--coordinator", help="publish the snapshot to this coordinator")
    stats.add_argument("--short-samples", type=_positive_int, default=10)
    stats.add_argument("--long-samples", type=_positive_int, default=1000)
    stats.add_argument("--max-sample-age-s", type=_non_negative_float, default=1800.0,
                       help="leave out workers and tasks silent this long behind their group's newest report "
                            "(default 1800 = two of the 15 min maximum report interval; 0 keeps all)")

    demo = sub.add_parser("demo", help="coordinator + workers: form, rebalance, lose a worker")
    demo.add_argument("--workers", type=_positive_int, default=3)
    demo.add_argument("--tasks", type=_positive_int, default=8)
    demo.add_argument("--data-dir", help="default: a temporary directory")
    demo.add_argument("--skip-stats", action="store_true", help="skip the Spark load statistics part")
    return parser


# ---------------------------------------------------------------------- admin commands


def _admin(address: str) -> Any:
    from groupcoord.admin import AdminClient

    try:
        return AdminClient(address)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _state_name(state: int) -> str:
    return {
        pb.EMPTY: "Empty", pb.PREPARING_REBALANCE: "PreparingRebalance", pb.AWAITING_SYNC: "AwaitingSync",
        pb.STABLE: "Stable", pb.DEAD: "Dead",
    }.get(state, "Unknown")


def _balance(response: pb.DescribeGroupResponse) -> dict[str, Any]:
    """Assignment quality of the current generation (assignors.metrics)."""
    from assignors.base import TaskReplica
    from assignors.metrics import summarize

    assignment = {
        d.member.member_id: [TaskReplica(t.task_id, t.replica) for t in d.assigned] for d in response.members
    }
    weights = {t.task_id: (t.weight or 1.0) for t in response.tasks}
    racks = {d.member.member_id: d.member.metadata.rack for d in response.members}
    pools = {d.member.member_id: d.member.metadata.pool for d in response.members}
    quality = summarize(assignment, weights=weights, racks=racks, pools=pools, unassigned=len(response.unassigned))
    return quality.as_dict()


def describe_as_dict(response: pb.DescribeGroupResponse) -> dict[str, Any]:
    """The stable JSON shape of ``groups describe --json`` (documented in the README)."""
    members = []
    for described in response.members:
        m = described.member
        members.append({
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "rack": m.metadata.rack,
            "pool": m.metadata.pool,
            "tasks": [t.task_id if t.replica == 0 else f"{t.task_id}#{t.replica}" for t in described.assigned],
            "last_seen_ms_ago": described.last_seen_ms_ago,
        })
    result: dict[str, Any] = {
        "group": response.group_id,
        "state": _state_name(response.state),
        "generation": response.generation,
        "protocol": response.protocol,
        "leader": response.leader_id,
        "members": members,
        "tasks": [t.task_id for t in response.tasks],
        "unassigned": [
            {"task": u.task.task_id, "replica": u.task.replica, "reason": u.reason} for u in response.unassigned
        ],
        "last_error": response.last_error,
        "balance": _balance(response),
    }
    if response.HasField("load_snapshot"):
        import time

        snap = response.load_snapshot
        result["load_snapshot"] = {
            "snapshot_id": snap.snapshot_id,
            "created_ms": snap.created_ms,
            "age_s": round(max(0.0, time.time() - snap.created_ms / 1000), 1),
            "workers": {
                w.worker_id: {
                    "cpu_usage": w.cpu_usage, "cpu_limit": w.cpu_limit,
                    "memory_usage": w.memory_usage, "memory_limit": w.memory_limit,
                    "num_tasks": w.num_tasks, "long_msg_rate_in": w.long_msg_rate_in,
                    "long_msg_rate_out": w.long_msg_rate_out,
                }
                for w in snap.workers
            },
        }
    return result


def _print_describe(info: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    import shutil

    console = Console(highlight=False, width=max(140, shutil.get_terminal_size((140, 24)).columns))
    head = Table(box=None, show_edge=False, pad_edge=False)
    for column in ("GROUP", "STATE", "GENERATION", "ASSIGNOR", "LEADER", "MEMBERS", "TASKS"):
        head.add_column(column)
    head.add_row(info["group"], info["state"], str(info["generation"]), info["protocol"] or "-",
                 info["leader"] or "-", str(len(info["members"])), str(len(info["tasks"])))
    console.print(head)
    console.print()
    members = Table(box=None, show_edge=False, pad_edge=False)
    load = info.get("load_snapshot", {}).get("workers", {})
    columns = ["MEMBER-ID", "INSTANCE-ID", "HOST", "RACK", "POOL", "#", "TASKS"]
    if load:
        columns += ["CPU%", "MSG/S IN+OUT"]
    for column in columns:
        members.add_column(column, overflow="fold")
    for m in info["members"]:
        row = [m["member_id"], m["instance_id"] or "-", m["host"] or "-", m["rack"] or "-", m["pool"] or "-",
               str(len(m["tasks"])), " ".join(m["tasks"]) or "-"]
        if load:
            w = load.get(m["member_id"])
            row += ["-", "-"] if w is None else [
                f"{100 * w['cpu_usage'] / w['cpu_limit']:.0f}" if w["cpu_limit"] > 0 else "-",
                f"{w['long_msg_rate_in'] + w['long_msg_rate_out']:.1f}",
            ]
        members.add_row(*row)
    if info["members"]:
        console.print(members)
    else:
        console.print("(no members)")
    console.print(f"\ntask catalog ({len(info['tasks'])}): {' '.join(info['tasks']) or '-'}")
    if info["unassigned"]:
        console.print("unassigned: " + ", ".join(f"{u['task']}#{u['replica']} ({u['reason']})"
                                                 for u in info["unassigned"]))
    if info["last_error"]:
        console.print(f"last error: {info['last_error']}")
    if "load_snapshot" in info:
        snap = info["load_snapshot"]
        console.print(f"load snapshot {snap['snapshot_id'] or '-'}: {snap['age_s']}s old, "
                      f"{len(snap['workers'])} worker(s)")


def _cmd_groups(args: argparse.Namespace) -> int:
    with _admin(args.coordinator) as admin:
        if args.groups_command == "list":
            groups = admin.list_groups()
            if args.json:
                print(json.dumps([{"group": g.group_id, "state": _state_name(g.state), "generation": g.generation,
                                   "members": g.num_members, "protocol": g.protocol} for g in groups]))
            else:
                if not groups:
                    print("(no groups)")
                for g in groups:
                    print(f"{g.group_id}\t{_state_name(g.state)}\tgeneration {g.generation}\t"
                          f"{g.num_members} member(s)\t{g.protocol or '-'}")
            return 0
        info = describe_as_dict(admin.describe_group(args.group))
        if args.json:
            print(json.dumps(info))
        else:
            _print_describe(info)
        return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    with _admin(args.coordinator) as admin:
        if args.tasks_command == "put":
            if len(set(args.task_ids)) != len(args.task_ids):
                duplicates = sorted({t for t in args.task_ids if args.task_ids.count(t) > 1})
                raise errors.DuplicateTaskError(f"task id(s) given twice: {', '.join(duplicates)}")
            count = admin.put_tasks(args.group, args.task_ids, replicas=args.replicas, pool=args.pool,
                                    weight=args.weight)
            print(f"group {args.group}: {count} task(s) in the catalog")
        else:
            count = admin.delete_tasks(args.group, args.task_ids)
            print(f"group {args.group}: {count} task(s) in the catalog")
    return 0


# ---------------------------------------------------------------------- serve / worker


def _cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.runtime import ServeOptions, run_coordinator

    try:
        options = ServeOptions.from_args(args)
        return run_coordinator(options)
    except ValueError as error:  # bad config, unusable data dir or store file, port in use
        raise UsageError(str(error)) from None


class _JsonLinesListener:
    """Prints the worker's events as JSON lines: the console consumer of this system."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client: Any = None
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        with self._lock:
            print(json.dumps({"event": event, "worker": self.name, **fields}), flush=True)

    def on_joined(self, member_id: str, generation: int, is_leader: bool) -> None:
        self.emit("joined", member_id=member_id, generation=generation, leader=is_leader)

    def on_assigned(self, tasks: Sequence[Any], generation: int) -> None:
        self.emit("assigned", generation=generation, member_id=self.client.member_id if self.client else "",
                  tasks=[str(t) if t.replica else t.task_id for t in tasks])

    def on_revoked(self, tasks: Sequence[Any]) -> None:
        self.emit("revoked", tasks=[str(t) if t.replica else t.task_id for t in tasks])


def _cmd_worker(args: argparse.Namespace) -> int:
    from worker import WorkerClient, WorkerConfig

    try:
        config = WorkerConfig(
            group_id=args.group,
            coordinators=args.coordinator,
            client_id=args.name,
            assignors=tuple(a.strip() for a in args.assignor.split(",") if a.strip()),
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            rebalance_timeout_ms=args.rebalance_timeout_ms,
            rack=args.rack,
            pool=args.pool,
            capacity=args.capacity,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    from assignors.registry import UnknownAssignorError, get_assignor

    for name in config.assignors:
        try:
            get_assignor(name)
        except UnknownAssignorError as error:
            raise UsageError(str(error)) from None
    listener = _JsonLinesListener(args.name)
    reporter = None
    if args.report_load:
        from worker.load import demo_load_reporter

        reporter = demo_load_reporter(args.name)
    client = WorkerClient(config, listener, load_reporter=reporter)
    listener.client = client
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    client.start()
    while not stop.wait(0.2):
        if client.fatal_error is not None:
            break
    client.close()
    listener.emit("left", member_id="")
    if client.fatal_error is not None:
        print(f"groupcoord worker: {client.fatal_error}", file=sys.stderr)
        return 1
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from groupcoord.cli.stats import run_stats_command

    return run_stats_command(args)


def _cmd_demo(args: argparse.Namespace) -> int:
    from groupcoord.cli.demo import run_demo

    return run_demo(workers=args.workers, tasks=args.tasks, data_dir=args.data_dir, with_stats=not args.skip_stats)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.log_level != "debug":
        logging.getLogger("transitions").setLevel(logging.WARNING)
    handlers = {
        "serve": _cmd_serve, "worker": _cmd_worker, "groups": _cmd_groups, "tasks": _cmd_tasks,
        "stats": _cmd_stats, "demo": _cmd_demo,
    }
    try:
        return handlers[args.command](args)
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

