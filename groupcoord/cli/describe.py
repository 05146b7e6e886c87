"""``groups describe``: a DescribeGroup response as the stable JSON shape and as a table.

Shared by the ``groups`` command and the demo, which shows each group it reaches.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.metrics import summarize
from groupcoord.cli.common import printable
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["describe_as_dict", "print_describe", "short_id", "state_name"]

_STATE_NAMES: dict[int, str] = {
    pb.EMPTY: "Empty", pb.PREPARING_REBALANCE: "PreparingRebalance", pb.AWAITING_SYNC: "AwaitingSync",
    pb.STABLE: "Stable", pb.DEAD: "Dead", pb.ASSIGNING: "Assigning", pb.RECONCILING: "Reconciling",
}


def state_name(state: int) -> str:
    """The group state as the docs (docs/reference/states.md) and ``groups list`` spell it."""
    return _STATE_NAMES.get(state, "Unknown")


def _balance(response: pb.DescribeGroupResponse) -> dict[str, Any]:
    """Assignment quality of the current generation (assignors.metrics)."""
    assignment = {
        d.member.member_id: [TaskReplica(t.task_id, t.replica) for t in d.assigned] for d in response.members
    }
    weights = {t.task_id: (t.weight or 1.0) for t in response.tasks}
    racks = {d.member.member_id: d.member.metadata.rack for d in response.members}
    pools = {d.member.member_id: d.member.metadata.pool for d in response.members}
    quality = summarize(assignment, weights=weights, racks=racks, pools=pools, unassigned=len(response.unassigned))
    return quality.as_dict()


def _load_snapshot(snap: pb.LoadSnapshot) -> dict[str, Any]:
    return {
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


def _replica_names(replicas: Any) -> list[str]:
    return [_replica_name(t) for t in replicas]


def _replica_name(t: pb.TaskReplica) -> str:
    return t.task_id if t.replica == 0 else f"{t.task_id}#{t.replica}"


def _consumer_member(described: pb.DescribedMember) -> dict[str, Any]:
    """A consumer-protocol member's reconciliation: its epoch and state, target against what it has,
    and for each split child it waits for, the parent still held and by whom."""
    c = described.consumer
    return {"member_epoch": c.member_epoch, "state": c.state, "away": c.away, "target": _replica_names(c.target),
            "revoking": _replica_names(c.revoking), "waiting": _replica_names(c.waiting),
            "waiting_for_parent": [{"task": _replica_name(w.child), "parent": _replica_name(w.parent),
                                    "held_by": w.held_by} for w in c.split_waits]}


def _waiting_cell(m: dict[str, Any]) -> str:
    """The WAITING-FOR column: each task, a split child with the parent it waits for (``child(after parent)``)."""
    parents = {w["task"]: w["parent"] for w in m.get("waiting_for_parent", [])}
    return " ".join(f"{t}(after {parents[t]})" if t in parents else t for t in m["waiting"]) or "-"


def describe_as_dict(response: pb.DescribeGroupResponse) -> dict[str, Any]:
    """The stable JSON shape of ``groups describe --json`` (documented in docs/cli.md, "groupcoord groups describe")."""
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
            "tasks": _replica_names(described.assigned),
            "last_seen_ms_ago": described.last_seen_ms_ago,
            **(_consumer_member(described) if described.HasField("consumer") else {}),
        })
    result: dict[str, Any] = {
        "group": response.group_id,
        "type": response.group_type or "classic",
        "state": state_name(response.state),
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
    if response.group_type == "consumer":
        result["group_epoch"], result["target_epoch"] = response.group_epoch, response.target_epoch
    if response.HasField("load_snapshot"):
        result["load_snapshot"] = _load_snapshot(response.load_snapshot)
    return result


def short_id(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (an ellipsis where it was cut): the start
    names the process, the end tells two members of one process apart."""
    if len(text) <= width or width < 8:
        return text
    tail = min(12, (width - 1) // 2)
    return f"{text[:width - 1 - tail]}…{text[-tail:]}"


def _id_width(info: dict[str, Any], width: int) -> int:
    """Room for member ids: a quarter of the terminal, at least 20 characters, never more than needed."""
    longest = max((len(m["member_id"]) for m in info["members"]), default=0)
    return min(longest, max(20, width // 4))


def _members_table(info: dict[str, Any], width: int, wide: bool) -> Table:
    members = Table(box=None, show_edge=False, pad_edge=False)
    load = info.get("load_snapshot", {}).get("workers", {})
    consumer = info.get("type") == "consumer"
    columns = ["MEMBER-ID", "INSTANCE-ID", "HOST", "RACK", "POOL", "#", "TASKS"]
    if consumer:
        columns[5:5] = ["EPOCH", "RECONCILING"]
        columns += ["TARGET#", "GIVING-UP", "WAITING-FOR"]
    if load:
        columns += ["CPU%", "MSG/S IN+OUT"]
    ids = 10_000 if wide else _id_width(info, width)
    for column in columns:  # ids never wrap: they are shortened (or shown whole with --wide)
        folds = column in ("TASKS", "GIVING-UP", "WAITING-FOR")
        members.add_column(column, overflow="fold" if folds else "ellipsis", no_wrap=not folds)
    for m in info["members"]:
        row = [short_id(m["member_id"], ids), short_id(m["instance_id"], ids) or "-", m["host"] or "-",
               m["rack"] or "-", m["pool"] or "-",
               str(len(m["tasks"])), " ".join(m["tasks"]) or "-"]
        if consumer:
            row[5:5] = [str(m["member_epoch"]), "away" if m["away"] else m["state"]]
            row += [str(len(m["target"])), " ".join(m["revoking"]) or "-", _waiting_cell(m)]
        if load:
            w = load.get(m["member_id"])
            row += ["-", "-"] if w is None else [
                f"{100 * w['cpu_usage'] / w['cpu_limit']:.0f}" if w["cpu_limit"] > 0 else "-",
                f"{w['long_msg_rate_in'] + w['long_msg_rate_out']:.1f}",
            ]
        members.add_row(*row)
    return members


def print_describe(info: dict[str, Any], *, width: int | None = None, wide: bool = False) -> None:
    """``describe_as_dict``'s result as a table, like kafka-consumer-groups --describe. Fits the
    terminal: member ids are shortened in the middle, never wrapped (``wide``: shown whole)."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    info = printable(info)
    console = Console(highlight=False, markup=False, emoji=False, width=10_000 if wide else width, soft_wrap=wide)
    ids = 10_000 if wide else _id_width(info, width)
    head = Table(box=None, show_edge=False, pad_edge=False, show_header=False)
    head.add_column("key", no_wrap=True)
    head.add_column("value", overflow="fold")
    if info.get("type") == "consumer":
        state = f"{info['state']}, group epoch {info['group_epoch']}, target epoch {info['target_epoch']}"
    else:
        state = f"{info['state']}, generation {info['generation']}"
    for key, value in (("GROUP", info["group"]), ("STATE", state), ("PROTOCOL", info.get("type", "classic")),
                       ("ASSIGNOR", info["protocol"] or "-"), ("LEADER", short_id(info["leader"], ids) or "-"),
                       ("MEMBERS", f"{len(info['members'])} member(s), {len(info['tasks'])} task(s)")):
        head.add_row(key, value)
    console.print(head)
    console.print()
    if info["members"]:
        console.print(_members_table(info, width, wide))
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
