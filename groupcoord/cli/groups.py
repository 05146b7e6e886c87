"""``groupcoord groups list|describe|plan|remove-members`` and ``groupcoord tasks put|delete``: the admin commands."""

from __future__ import annotations

import argparse
import json
import sys

from groupcoord import errors
from groupcoord.admin import AdminClient
from groupcoord.cli.common import UsageError, open_admin, printable, resolve_group
from groupcoord.cli.describe import describe_as_dict, print_describe, state_name
from groupcoord.cli.plan import run_plan
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["run_groups", "run_tasks"]


def run_groups(args: argparse.Namespace) -> int:
    if args.groups_command != "list":
        args.group = resolve_group(args)
    if args.groups_command == "plan":
        return run_plan(args)
    with open_admin(args.coordinator, args) as admin:
        if args.groups_command == "remove-members":
            return _remove_members(admin, args)
        if args.groups_command == "list":
            listing = admin.list_all_groups()
            groups = listing.groups
            for address, why in printable(listing.failed).items():
                print(f"groupcoord groups: coordinator {address} did not answer ({why}): its groups are not listed",
                      file=sys.stderr)
            if listing.leaderless_shards:
                print(f"groupcoord groups: {listing.leaderless_shards} shard(s) have no leader right now: their "
                      "groups are not listed", file=sys.stderr)
            if args.json:
                print(json.dumps([_listing_as_dict(g) for g in groups]))
            else:
                if not groups:
                    print("(no groups)")
                for g in groups:
                    where = f"epoch {g.group_epoch} (target {g.target_epoch})" if g.group_type == "consumer" \
                        else f"generation {g.generation}"
                    print(f"{printable(g.group_id)}\t{state_name(g.state)}\t{where}\t{g.num_members} member(s)\t"
                          f"{printable(g.protocol) or '-'}\t{g.group_type or 'classic'}")
            return 0
        info = describe_as_dict(admin.describe_group(args.group))
        if args.json:
            print(json.dumps(info))
        else:
            print_describe(info, wide=args.wide)
        return 0


def _listing_as_dict(g: pb.GroupListing) -> dict[str, object]:
    """One group of ``groups list --json`` (docs/cli.md); a consumer group adds its epochs."""
    listed: dict[str, object] = {"group": g.group_id, "type": g.group_type or "classic", "state": state_name(g.state),
                                 "generation": g.generation, "members": g.num_members, "protocol": g.protocol}
    if g.group_type == "consumer":
        listed["group_epoch"], listed["target_epoch"] = g.group_epoch, g.target_epoch
    return listed


def _remove_members(admin: AdminClient, args: argparse.Namespace) -> int:
    """One batch LeaveGroup; 0 when every named member was removed, 1 when any was not."""
    if not args.instance_ids and not args.member_ids:
        raise UsageError("name at least one --instance-id or --member-id")
    answers = admin.remove_members(args.group, instance_ids=args.instance_ids, member_ids=args.member_ids)
    rows = [{"member_id": a.member_id, "instance_id": a.instance_id,
             "error": errors.code_name(a.error.code) if a.error.code else "", "message": a.error.message
             if a.error.code else ""} for a in answers]
    if args.json:
        print(json.dumps(rows))
    for row in [] if args.json else printable(rows):
        who = f"instance {row['instance_id']}" if row["instance_id"] else f"member {row['member_id']}"
        print(f"{who}: " + (f"not removed: {row['error']}: {row['message']}" if row["error"] else
                            f"removed (member {row['member_id']})"))
    return 1 if any(row["error"] for row in rows) else 0


def run_tasks(args: argparse.Namespace) -> int:
    args.group = resolve_group(args, args.task_ids)
    if not args.task_ids:
        raise UsageError("name at least one TASK after the group")
    with open_admin(args.coordinator, args) as admin:
        if args.tasks_command == "put":
            if len(set(args.task_ids)) != len(args.task_ids):
                duplicates = sorted({t for t in args.task_ids if args.task_ids.count(t) > 1})
                raise errors.DuplicateTaskError(f"task id(s) given twice: {', '.join(duplicates)}")
            count = admin.put_tasks(args.group, args.task_ids, replicas=args.replicas, pool=args.pool,
                                    weight=args.weight)
        else:
            count = admin.delete_tasks(args.group, args.task_ids)
        print(f"group {args.group}: {count} task(s) in the catalog")
    return 0
