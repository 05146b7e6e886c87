"""``groups describe``: a DescribeGroup response as the stable JSON shape and as a table.

Shared by the ``groups`` command and the demo, which shows each group it reaches.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from assignors.base import TaskReplica
from assignors.metrics import summarize
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["describe_as_dict", "print_describe", "state_name"]

_STATE_NAMES: dict[int, str] = {
    pb.EMPTY: "Empty", pb.PREPARING_REBALANCE: "PreparingRebalance", pb.AWAITING_SYNC: "AwaitingSync",
    pb.STABLE: "Stable", pb.DEAD: "Dead",
}


def state_name(state: int) -> str:
    """The group state as the README and ``groups list`` spell it."""
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
    if response.HasField("load_snapshot"):
        result["load_snapshot"] = _load_snapshot(response.load_snapshot)
    return result


def _members_table(info: dict[str, Any]) -> Table:
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
    return members


def print_describe(info: dict[str, Any]) -> None:
    """``describe_as_dict``'s result as a table, like kafka-consumer-groups --describe."""
    console = Console(highlight=False, width=max(140, shutil.get_terminal_size((140, 24)).columns))
    head = Table(box=None, show_edge=False, pad_edge=False)
    for column in ("GROUP", "STATE", "GENERATION", "ASSIGNOR", "LEADER", "MEMBERS", "TASKS"):
        head.add_column(column)
    head.add_row(info["group"], info["state"], str(info["generation"]), info["protocol"] or "-",
                 info["leader"] or "-", str(len(info["members"])), str(len(info["tasks"])))
    console.print(head)
    console.print()
    if info["members"]:
        console.print(_members_table(info))
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
