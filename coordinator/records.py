"""A group as a JSON-serialisable record (what stores keep), and back.

Protobuf parts (member metadata, tasks, the load snapshot) are kept as
base64 of their wire form: compact, and forward-compatible the way the wire
is. Held requests and timers are not kept: a restarted coordinator gives the
members new session timers and re-runs an interrupted rebalance.
"""

from __future__ import annotations

import base64
from typing import Any

from coordinator.group import Group, Member
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["group_to_record", "group_from_record", "RECORD_VERSION"]

RECORD_VERSION = 1


def _b64(message: Any) -> str:
    return base64.b64encode(message.SerializeToString(deterministic=True)).decode("ascii")


def _parse(cls: Any, text: str) -> Any:
    message = cls()
    message.ParseFromString(base64.b64decode(text))
    return message


def group_to_record(group: Group) -> dict[str, Any]:
    return {
        "version": RECORD_VERSION,
        "group_id": group.group_id,
        "state": group.state.value,
        "generation": group.generation,
        "protocol": group.protocol,
        "protocol_type": group.protocol_type,
        "leader_id": group.leader_id,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "instance_id": m.instance_id,
                "host": m.host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "protocols": list(m.protocols),
                "protocol_type": m.protocol_type,
                "rebalance_protocols": list(m.rebalance_protocols),
                "metadata": _b64(m.metadata),
            }
            for m in group.members.values()
        ],
        "assignment": {
            member_id: [[r.task_id, r.replica] for r in replicas] for member_id, replicas in group.assignment.items()
        },
        "user_data": {member_id: base64.b64encode(data).decode("ascii") for member_id, data in group.user_data.items()},
        "rebalance_protocol": group.rebalance_protocol,
        "owners": [[t, r, sorted(who)] for (t, r), who in sorted(group.owners.items())],
        "revoking": sorted([t, r] for t, r in group.revoking),
        "unassigned": [[u.task.task_id, u.task.replica, u.reason] for u in group.unassigned],
        "tasks": _catalog_record(group),
        "load_snapshot": _b64(group.load_snapshot) if group.load_snapshot is not None else None,
        "last_error": group.last_error,
    }


def _catalog_record(group: Group) -> list[str]:
    """The catalog's serialised form, cached until the catalog changes (it dominates large records)."""
    cached = group.record_tasks_cache
    if cached is None or cached[0] != group.catalog_version:
        cached = (group.catalog_version, [_b64(group.tasks[t]) for t in sorted(group.tasks)])
        group.record_tasks_cache = cached
    return cached[1]


def group_from_record(record: dict[str, Any]) -> Group:
    if record.get("version") != RECORD_VERSION:
        raise ValueError(f"group record version {record.get('version')!r} is not {RECORD_VERSION}")
    group = Group(
        record["group_id"],
        generation=record["generation"],
        protocol=record["protocol"],
        protocol_type=record.get("protocol_type", ""),
        leader_id=record["leader_id"],
        last_error=record.get("last_error", ""),
    )
    for m in record["members"]:
        group.add(Member(
            member_id=m["member_id"],
            group_id=group.group_id,
            client_id=m["client_id"],
            instance_id=m["instance_id"],
            host=m["host"],
            session_timeout_ms=m["session_timeout_ms"],
            rebalance_timeout_ms=m["rebalance_timeout_ms"],
            protocols=tuple(m["protocols"]),
            protocol_type=m.get("protocol_type", ""),
            rebalance_protocols=tuple(m.get("rebalance_protocols", ())),
            metadata=_parse(pb.MemberMetadata, m["metadata"]),
        ))
    group.leader_id = record["leader_id"]  # ``add`` names the first member leader; the record knows better
    group.rebalance_protocol = record.get("rebalance_protocol", "eager")
    group.owners = {(t, r): frozenset(who) for t, r, who in record.get("owners", [])}
    group.revoking = {(t, r) for t, r in record.get("revoking", [])}
    group.user_data = {member_id: base64.b64decode(text) for member_id, text in record.get("user_data", {}).items()}
    group.assignment = {
        member_id: [pb.TaskReplica(task_id=t, replica=r) for t, r in replicas]
        for member_id, replicas in record["assignment"].items()
    }
    group.unassigned = [
        pb.UnassignedReplica(task=pb.TaskReplica(task_id=t, replica=r), reason=reason)
        for t, r, reason in record["unassigned"]
    ]
    for text in record["tasks"]:
        task = _parse(pb.Task, text)
        group.tasks[task.task_id] = task
    if record.get("load_snapshot"):
        group.load_snapshot = _parse(pb.LoadSnapshot, record["load_snapshot"])
    return group
