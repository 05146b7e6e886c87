"""A group as a JSON-serialisable record (what stores keep), and back.

Protobuf parts (member metadata, tasks, the load snapshot) are kept as
base64 of their wire form: compact, and forward-compatible the way the wire
is. Held requests and timers are not kept: a restarted coordinator gives the
members new session timers and re-runs an interrupted rebalance.

A record is drafted on the event loop (``group_to_record``: references and shallow
copies, cheap) and finished by the store writer's thread (``finish_record``: the
serialising, which for a 100,000-task catalog takes a fraction of a second). The draft
may keep references to protobuf messages because the model replaces them, never
changes them in place. A member's metadata is the exception: the draft takes its base64,
which the member keeps while its metadata stays the same message (``Member.record_metadata``),
so a rebalance serialises it at most once instead of once per record.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.coordinator.model.catalog_snapshot import CatalogSnapshot, b64
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["group_to_record", "finish_record", "group_from_record", "CatalogSnapshot", "RECORD_VERSION"]

RECORD_VERSION = 1


def _parse(cls: Any, text: str) -> Any:
    message = cls()
    message.ParseFromString(base64.b64decode(text))
    return message


def group_to_record(group: Group) -> dict[str, Any]:
    """The group's record as a draft: ``finish_record`` makes it JSON-ready (see the module doc)."""
    return {
        "version": RECORD_VERSION,
        "group_id": group.group_id,
        "state": group.state.value,
        "generation": group.generation,
        "protocol": group.protocol,
        "protocol_type": group.protocol_type,
        "leader_id": group.leader_id,
        "members": [member_entry(m) for m in group.members.values()],
        "assignment": {member_id: tuple(replicas) for member_id, replicas in group.assignment.items()},
        "user_data": {member_id: base64.b64encode(data).decode("ascii") for member_id, data in group.user_data.items()},
        "rebalance_protocol": group.rebalance_protocol.value,
        "owners": dict(group.owners),
        "revoking": sorted([t, r] for t, r in group.revoking),
        "unassigned": [[u.task.task_id, u.task.replica, u.reason] for u in group.unassigned],
        "tasks": group.catalog_snapshot(),  # serialised (once per catalog version) by ``finish_record``
        "load_snapshot": group.load_snapshot,
        "last_error": group.last_error,
        "creator": group.creator,
        "founder": group.founder,
    }


def member_entry(m: Member) -> dict[str, Any]:
    """``m``'s entry in its group's record, made again only when one of its fields changed: a rebalance
    writes the record three times, and most members change nothing in it. Entries are never changed
    once made (records share them)."""
    fields = (m.member_id, m.client_id, m.instance_id, m.host, m.session_timeout_ms, m.rebalance_timeout_ms,
              m.protocols, m.protocol_type, m.rebalance_protocols, m.metadata, m.principal)
    made = m.record_entry
    if made is not None and made[0] == fields:
        return made[1]
    entry: dict[str, Any] = {
        "member_id": m.member_id,
        "client_id": m.client_id,
        "instance_id": m.instance_id,
        "host": m.host,
        "session_timeout_ms": m.session_timeout_ms,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "protocols": list(m.protocols),
        "protocol_type": m.protocol_type,
        "rebalance_protocols": list(m.rebalance_protocols),
        "metadata": m.record_metadata(),  # serialised once per description, not per record
        "principal": m.principal,
    }
    m.record_entry = (fields, entry)
    return entry


def finish_record(draft: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-ready record of a draft (idempotent: a finished record comes back equal)."""
    record = dict(draft)
    tasks = record["tasks"]
    if isinstance(tasks, CatalogSnapshot):
        record["tasks"] = tasks.serialised()
    record["members"] = [
        {**m, "metadata": b64(m["metadata"])} if not isinstance(m["metadata"], str) else m for m in record["members"]
    ]
    record["assignment"] = {member_id: _as_pairs(replicas) for member_id, replicas in record["assignment"].items()}
    owners = record["owners"]
    if isinstance(owners, dict):
        record["owners"] = [[t, r, sorted(who)] for (t, r), who in sorted(owners.items())]
    snapshot = record["load_snapshot"]
    if snapshot is not None and not isinstance(snapshot, str):
        record["load_snapshot"] = b64(snapshot)
    return record


def _as_pairs(replicas: Sequence[Any]) -> list[list[Any]]:
    """A member's replicas as ``[task id, replica]`` pairs (a draft holds the messages, a finished
    record the pairs). One comprehension for a draft, no test per replica: a record of 100,000
    replicas is finished twice per rebalance (the phase's start and its end), and building each
    pair as a list display beats ``map(list, zip(...))`` by a fifth (benchmarks/coordinator_bench.py)."""
    if replicas and not isinstance(replicas[0], list):
        try:
            return [[r.task_id, r.replica] for r in replicas]
        except AttributeError:
            pass  # pairs and messages mixed: one at a time below
    return [r if isinstance(r, list) else [r.task_id, r.replica] for r in replicas]


def group_from_record(draft: Mapping[str, Any]) -> Group:
    record = finish_record(draft)
    if record.get("version") != RECORD_VERSION:
        raise ValueError(f"group record version {record.get('version')!r} is not {RECORD_VERSION}")
    group = Group(
        record["group_id"],
        generation=record["generation"],
        protocol=record["protocol"],
        protocol_type=record.get("protocol_type", ""),
        leader_id=record["leader_id"],
        last_error=record.get("last_error", ""),
        creator=record.get("creator", ""),  # records written before quotas have none
        founder=record.get("founder", ""),
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
            principal=m.get("principal", ""),  # records written before principals were kept have none
        ))
    group.leader_id = record["leader_id"]  # ``add`` names the first member leader; the record knows better
    group.rebalance_protocol = RebalanceProtocol.of(record.get("rebalance_protocol", ""))
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
