"""A consumer-protocol group's part of its group record (the ``consumer`` key), and back.

The group record stays one record per group (``coordinator.model.records``): a consumer group's
state rides along as its ``consumer`` entry, so it is written, fenced, loaded and rolled back with
the group, by every store. The entry is built JSON-ready on the event loop, O(members): each change
of a member's state writes the whole group, as a classic phase does (per-member records are next).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.catalog_snapshot import b64
from groupcoord.coordinator.model.consumer_group import ClassicTraits, ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled
from groupcoord.coordinator.model.records import group_to_record
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["consumer_to_record", "consumer_from_record", "member_entry", "record_of", "target_entry"]


def _pairs(tasks: Iterable[TaskReplica]) -> list[list[Any]]:
    return [[t.task_id, t.replica] for t in sorted(tasks)]


def _tasks(pairs: Iterable[list[Any]]) -> frozenset[TaskReplica]:
    return frozenset(TaskReplica(t, r) for t, r in pairs)


def member_entry(m: ConsumerMember) -> dict[str, object]:
    """One member's part of the record (kept per member by ``ConsumerGroup.refresh``)."""
    entry: dict[str, object] = {
        "member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "host": m.host,
        "principal": m.principal, "metadata": b64(m.metadata), "session_timeout_ms": m.session_timeout_ms,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "state": m.reconciled.state.value,
        "epoch": m.epoch, "previous_epoch": m.previous_epoch, "away": m.away,
        "assigned": _pairs(m.reconciled.assigned), "revoking": _pairs(m.reconciled.revoking),
    }
    if m.classic is not None:  # a classic-protocol member of a converted group
        entry["classic"] = {"protocols": list(m.classic.protocols), "protocol_type": m.classic.protocol_type,
                            "rebalance_protocols": list(m.classic.rebalance_protocols)}
    return entry


def target_entry(group: ConsumerGroup) -> dict[str, list[list[Any]]]:
    """The target as the record writes it: a member's pairs are sorted once per target it is given
    (a new target, or a member gone), not on every write of the group (100,000 tasks: ~200 ms)."""
    kept = group.target_pairs
    entry: dict[str, list[list[Any]]] = {}
    for member_id, tasks in group.target.items():
        pairs = kept.get(member_id)
        if pairs is None or pairs[0] is not tasks:
            pairs = kept[member_id] = (tasks, _pairs(tasks))
        entry[member_id] = pairs[1]
    if len(kept) > len(entry):
        group.target_pairs = {member_id: kept[member_id] for member_id in entry}
    return entry


def consumer_to_record(group: ConsumerGroup) -> dict[str, Any]:
    """The group's consumer part: its figures, its target, and each member's kept entry (no member read)."""
    return {
        "epoch": group.epoch,
        "target_epoch": group.target_epoch,
        "assignor": group.assignor,
        "target": target_entry(group),
        "last_error": group.last_error,
        "members": list(group.entries.values()),
    }


def consumer_from_record(group_id: str, record: Mapping[str, Any], catalog_version: int | None,
                         now: float = 0.0) -> ConsumerGroup:
    """The group as stored; ``now``: when its members were last heard of (their sessions start afresh)."""
    group = ConsumerGroup(group_id, record["assignor"], epoch=record["epoch"], target_epoch=record["target_epoch"],
                          catalog_version=catalog_version, last_error=record.get("last_error", ""),
                          entry_of=member_entry)
    group.target = {member_id: _tasks(pairs) for member_id, pairs in record["target"].items()}
    for m in record["members"]:
        metadata = pb.MemberMetadata()
        metadata.ParseFromString(base64.b64decode(m["metadata"]))
        member = ConsumerMember(
            member_id=m["member_id"], instance_id=m["instance_id"], client_id=m["client_id"], host=m["host"],
            principal=m["principal"], metadata=metadata, session_timeout_ms=m["session_timeout_ms"],
            rebalance_timeout_ms=m["rebalance_timeout_ms"], away=m["away"], last_seen=now,
            classic=_classic(m.get("classic")))
        member.reconciled = Reconciled(MemberState.STABLE, m["epoch"], frozenset())
        group.add(member)
        group.hold(member, Reconciled(MemberState(m["state"]), m["epoch"], _tasks(m["assigned"]),
                                      _tasks(m["revoking"])))
        member.previous_epoch = m["previous_epoch"]
        group.refresh(member)
    return group


def _classic(entry: Mapping[str, Any] | None) -> ClassicTraits | None:
    if entry is None:
        return None
    return ClassicTraits(tuple(entry["protocols"]), entry["protocol_type"], tuple(entry["rebalance_protocols"]))


def record_of(classic: Group, group: ConsumerGroup | None) -> dict[str, Any]:
    """A group's record: its classic part, and its consumer part when it has one."""
    record = group_to_record(classic)
    if group is not None:
        record["consumer"] = consumer_to_record(group)
    return record
