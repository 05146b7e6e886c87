"""``groupcoord cluster describe``: coordinators, shards and moves in progress, as a table or JSON.

Every coordinator is asked (``AdminClient.describe_whole_cluster``), so each shard's groups and
members are counted by its own leader. An unsharded coordinator (standalone, active/standby) is
one shard.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from groupcoord.admin import ClusterView
from groupcoord.cli.common import open_admin, printable
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["cluster_as_dict", "print_cluster", "run_cluster"]

_SHARD_STATES: dict[int, str] = {
    pb.SHARD_ACTIVE: "active", pb.SHARD_LOADING: "loading", pb.SHARD_UNLOADING: "unloading",
    pb.SHARD_LEADERLESS: "leaderless",
}


def cluster_as_dict(view: ClusterView) -> dict[str, Any]:
    """The stable JSON shape of ``cluster describe --json`` (documented in docs/cli.md). ``groups``
    and ``members`` are null for a shard whose leader did not answer."""
    return {
        "mode": view.mode,
        "shards": view.shards,
        "asked": view.asked,
        "coordinators": [{"address": c.address, "shards_led": c.shards_led,
                          "answered": c.address not in view.failed} for c in view.coordinators],
        "shard_infos": [{"shard": s.shard, "leader": s.leader, "epoch": s.epoch,
                         "state": _SHARD_STATES.get(s.state, "unknown"),
                         "groups": s.groups if s.groups >= 0 else None,
                         "members": s.members if s.members >= 0 else None} for s in view.shard_infos],
        "moves": [{"shard": m.shard, "from": m.from_address, "to": m.to_address} for m in view.moves],
        "failed": dict(view.failed),
    }


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def print_cluster(info: dict[str, Any]) -> None:
    """``cluster_as_dict``'s result as three tables: coordinators, shards, moves."""
    info = printable(info)
    console = Console(highlight=False, markup=False, emoji=False, width=10_000, soft_wrap=True)
    groups = sum(s["groups"] or 0 for s in info["shard_infos"])
    members = sum(s["members"] or 0 for s in info["shard_infos"])
    console.print(f"CLUSTER  {info['mode']}, {info['shards']} shard(s), {len(info['coordinators'])} coordinator(s), "
                  f"{groups} group(s), {members} member(s) (asked {info['asked']})")
    console.print()
    coordinators = Table(box=None, show_edge=False, pad_edge=False)
    for column in ("COORDINATOR", "SHARDS-LED", "ANSWERED"):
        coordinators.add_column(column, no_wrap=True)
    for c in info["coordinators"]:
        coordinators.add_row(c["address"], str(c["shards_led"]), "yes" if c["answered"] else "no")
    console.print(coordinators)
    console.print()
    shards = Table(box=None, show_edge=False, pad_edge=False)
    for column in ("SHARD", "LEADER", "EPOCH", "STATE", "GROUPS", "MEMBERS"):
        shards.add_column(column, no_wrap=True)
    for s in info["shard_infos"]:
        shards.add_row(str(s["shard"]), s["leader"] or "-", str(s["epoch"]), s["state"], _count(s["groups"]),
                       _count(s["members"]))
    console.print(shards)
    console.print()
    if info["moves"]:
        moves = Table(box=None, show_edge=False, pad_edge=False)
        for column in ("MOVING-SHARD", "FROM", "TO"):
            moves.add_column(column, no_wrap=True)
        for m in info["moves"]:
            moves.add_row(str(m["shard"]), m["from"], m["to"] or "?")
        console.print(moves)
    else:
        console.print("(no shard moving)")


def run_cluster(args: argparse.Namespace) -> int:
    with open_admin(args.coordinator, args) as admin:
        view = admin.describe_whole_cluster()
    info = cluster_as_dict(view)
    if args.json:
        print(json.dumps(info))
    else:
        print_cluster(info)
    for address, why in printable(view.failed).items():
        print(f"groupcoord cluster: coordinator {address} did not answer ({why}): its shards' groups and "
              "members are unknown", file=sys.stderr)
    return 0
