"""``groups plan G``: what an assignor would do with the group now, without doing it.

A proposal to review, as Cruise Control shows one before it is executed: the group as it
runs (one DescribeGroup, the only call made), the context its leader would build from it,
the assignor run here in this process, and the difference: each member's tasks and load
before and after, every replica that would change owner, and the balance figures of
``assignors.metrics`` on both sides. Nothing is sent to the coordinator; the leader decides
at the next rebalance, and a stateful assignor (``balanced`` remembers its past moves, the
Pulsar shedders count rounds) may decide differently there than a fresh copy does here, and a
cooperative group takes the moves in two generations (revoked first, then placed).

``--snapshot PATH`` reads a load snapshot (a ``groupcoord stats --out`` directory) instead of
the one the coordinator holds for the group.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from groupcoord import errors
from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, TaskReplica
from groupcoord.assignors.metrics import owners, summarize
from groupcoord.assignors.registry import get_assignor
from groupcoord.assignors.snapshot import LoadSnapshot
from groupcoord.cli.common import STATS_EXTRA_HINT, UsageError, open_admin
from groupcoord.cli.describe import short_id
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import context_from_describe

__all__ = ["build_plan", "print_plan", "read_snapshot", "run_plan"]

Members = Mapping[str, Sequence[TaskReplica]]


def run_plan(args: argparse.Namespace) -> int:
    """Describe the group, run the assignor here, print the proposal (text or ``--json``)."""
    snapshot = read_snapshot(args.snapshot, args.group) if args.snapshot else None
    with open_admin(args.coordinator, args) as admin:
        response = admin.describe_group(args.group, include_load_snapshot=snapshot is None)
    name = args.assignor or response.protocol
    if not name:
        raise UsageError(f"group {args.group} has no assignor yet (no generation so far): name one with --assignor")
    try:
        assignor = get_assignor(name)
    except LookupError as error:
        raise UsageError(str(error).strip("'\"")) from None
    context = context_from_describe(response)
    if snapshot is not None:
        context = dataclasses.replace(context, load_snapshot=snapshot)
    try:
        assignment = assignor.assign(context)
    except AssignorError as error:
        raise errors.GroupCoordError(f"assignor {name} cannot assign group {args.group}: {error}") from None
    plan = build_plan(context, assignment, assignor=name, state=response.state,
                      snapshot_source=args.snapshot or ("coordinator" if context.load_snapshot else ""))
    if args.json:
        print(json.dumps(plan))
    else:
        print_plan(plan)
    return 0


def read_snapshot(path: str, group_id: str) -> LoadSnapshot:
    """The group's figures in the snapshot at ``path``; a UsageError says why there are none."""
    from groupcoord.loadstats.snapshot_io import read_snapshots  # pyarrow, when the tables are read

    try:
        snapshots = read_snapshots(path)
    except FileNotFoundError:
        raise UsageError(f"no load snapshot at {path} (expected the --out directory of groupcoord stats)") from None
    except ImportError:
        raise UsageError(f"reading a load snapshot needs pyarrow: {STATS_EXTRA_HINT}") from None
    except Exception as error:  # noqa: BLE001 - a damaged file: one line, whatever pyarrow raised
        raise UsageError(f"cannot read the load snapshot at {path}: {type(error).__name__}: {error}") from None
    snapshot = snapshots.get(group_id)
    if snapshot is None:
        raise UsageError(f"the load snapshot at {path} has no figures for group {group_id}")
    return snapshot


def _name(replica: TaskReplica) -> str:
    return replica.task_id if replica.replica == 0 else f"{replica.task_id}#{replica.replica}"


def build_plan(context: AssignmentContext, assignment: Assignment, *, assignor: str, state: int = 0,
               snapshot_source: str = "") -> dict[str, Any]:
    """The proposal as one JSON-ready dict (documented in docs/cli.md, "groupcoord groups plan")."""
    before: dict[str, list[TaskReplica]] = {m.member_id: list(m.owned) for m in context.members}
    after = {m.member_id: list(assignment.members.get(m.member_id, [])) for m in context.members}
    weights = {t.task_id: t.weight for t in context.tasks}
    snap = context.load_snapshot
    rates = {} if snap is None else {t: s.long_msg_rate_in + s.long_msg_rate_out for t, s in snap.tasks.items()}
    racks = {m.member_id: m.rack for m in context.members}
    pools = {m.member_id: m.pool for m in context.members}

    def load(replicas: Sequence[TaskReplica], figures: Mapping[str, float], default: float) -> float:
        return round(sum(figures.get(r.task_id, default) for r in replicas), 6)

    members = []
    for m in context.members:
        row: dict[str, Any] = {
            "member_id": m.member_id, "instance_id": m.instance_id,
            "tasks_before": len(before[m.member_id]), "tasks_after": len(after[m.member_id]),
            "weight_before": load(before[m.member_id], weights, 1.0),
            "weight_after": load(after[m.member_id], weights, 1.0),
        }
        if snap is not None:
            row["msg_rate_before"] = load(before[m.member_id], rates, 0.0)
            row["msg_rate_after"] = load(after[m.member_id], rates, 0.0)
        members.append(row)
    was = owners(before)
    moves, placed = [], []
    for member_id, replicas in sorted(after.items()):
        for replica in replicas:
            previous = was.get(replica)
            if previous is None:
                placed.append({"task": _name(replica), "to": member_id})
            elif previous != member_id:
                moves.append({"task": _name(replica), "from": previous, "to": member_id})
    moves.sort(key=lambda move: move["task"])
    placed.sort(key=lambda move: move["task"])
    unassigned_before = sum(1 for t in context.tasks for r in t.replica_ids() if r not in was)
    return {
        "group": context.group_id,
        "generation": context.generation,
        "state": pb.GroupState.Name(state) if state in pb.GroupState.values() else str(state),
        "assignor": assignor,
        "load_snapshot": None if snap is None else {"snapshot_id": snap.snapshot_id, "created_ms": snap.created_ms,
                                                    "source": snapshot_source},
        "members": members,
        "moves": moves,
        "placed": placed,
        "unassigned": [{"task": _name(r), "reason": reason} for r, reason in sorted(assignment.unassigned.items())],
        "splits": [{"task": s.parent_task_id, "into": [c.task_id for c in s.children]} for s in assignment.splits],
        "balance": {
            "before": summarize(before, weights=weights, racks=racks, pools=pools,
                                unassigned=unassigned_before).as_dict(),
            "after": summarize(after, previous=before, weights=weights, racks=racks, pools=pools,
                               unassigned=len(assignment.unassigned)).as_dict(),
        },
    }


def _figure(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_plan(plan: dict[str, Any], *, width: int | None = None) -> None:
    """The proposal as tables: members before → after, the moves, the balance on both sides."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    console = Console(highlight=False, width=width)
    snap = plan["load_snapshot"]
    console.print(f"GROUP {plan['group']}  generation {plan['generation']}  assignor {plan['assignor']}  "
                  f"load snapshot {snap['snapshot_id'] or '-'} ({snap['source']})" if snap else
                  f"GROUP {plan['group']}  generation {plan['generation']}  assignor {plan['assignor']}  "
                  f"no load snapshot")
    ids = max(20, width // 4)
    table = Table(box=None, show_edge=False, pad_edge=False)
    columns = ["MEMBER-ID", "INSTANCE-ID", "TASKS", "WEIGHT"] + (["MSG/S"] if snap else [])
    for column in columns:
        table.add_column(column, no_wrap=True, overflow="ellipsis")
    for m in plan["members"]:
        row = [short_id(m["member_id"], ids), m["instance_id"] or "-", f"{m['tasks_before']} → {m['tasks_after']}",
               f"{m['weight_before']:g} → {m['weight_after']:g}"]
        if snap:
            row.append(f"{m['msg_rate_before']:.1f} → {m['msg_rate_after']:.1f}")
        table.add_row(*row)
    console.print()
    console.print(table if plan["members"] else "(no members)")
    console.print(f"\nmoves ({len(plan['moves'])}):" + ("" if plan["moves"] else " none"))
    for move in plan["moves"]:
        console.print(f"  {move['task']}: {short_id(move['from'], ids)} → {short_id(move['to'], ids)}")
    if plan["placed"]:
        console.print(f"newly placed ({len(plan['placed'])}): "
                      + ", ".join(f"{p['task']} → {short_id(p['to'], ids)}" for p in plan["placed"]))
    if plan["unassigned"]:
        console.print("left unassigned: " + ", ".join(f"{u['task']} ({u['reason']})" for u in plan["unassigned"]))
    if plan["splits"]:
        console.print("splits: " + ", ".join(f"{s['task']} → {' '.join(s['into'])}" for s in plan["splits"]))
    balance = Table(box=None, show_edge=False, pad_edge=False)
    for column in ("BALANCE", "BEFORE", "AFTER"):
        balance.add_column(column, no_wrap=True)
    before, after = plan["balance"]["before"], plan["balance"]["after"]
    for key, label in (("count_max_over_mean", "replicas max/mean"), ("count_min_over_max", "replicas min/max"),
                       ("weight_max_over_mean", "weight max/mean"), ("weight_min_over_max", "weight min/max"),
                       ("rack_spread", "rack spread"), ("unassigned", "unassigned"), ("moved", "replicas moved")):
        balance.add_row(label, _figure(before[key]), _figure(after[key]))
    console.print()
    console.print(balance)
    console.print("\ndry run: nothing was changed; the group's leader assigns at the next rebalance")
