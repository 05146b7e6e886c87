"""A consumer-protocol group's records: the group's own, and one per member and per member's target.

As Kafka's coordinator writes ``ConsumerGroupMemberMetadata`` / ``ConsumerGroupCurrentMemberAssignment``
and ``ConsumerGroupTargetAssignmentMember`` per member, and the group's epochs apart, a change of k
members writes O(k) records, not the group (10,000 members: a whole record was 7.65 MB of JSON).

* The group's record (``coordinator.model.records``) carries the figures in its ``consumer`` entry
  (epoch, target epoch, assignor, last error; ``format`` 2), written only when it changed.
* Its per-member records ("parts", keyed ``m:<member id>`` and ``t:<member id>``): a member's entry
  (kept by ``ConsumerGroup.refresh``) and its target's pairs, written when they changed
  (``ConsumerGroup.changed`` and ``TargetMap.changed`` say which).

A store keeps the group's record and its parts and writes a change to both atomically
(``coordinator.storage``); loading reads them back into the same group. A record written before
(``format`` 1: every member and the target inside the ``consumer`` entry) still loads, and its
first write rewrites the group in this form.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.catalog_snapshot import b64
from groupcoord.coordinator.model.consumer_group import ClassicTraits, ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.effects import Persist
from groupcoord.coordinator.model.group import Group
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled
from groupcoord.coordinator.model.records import group_to_record
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["FORMAT", "consumer_from_record", "consumer_head", "member_entry", "record_of", "write_of"]

FORMAT = 2
MEMBER, TARGET = "m:", "t:"


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
        "assignor": m.assignor,  # the one it names ("" none): the group runs the most named
    }
    if m.classic is not None:  # a classic-protocol member of a converted group
        entry["classic"] = {"protocols": list(m.classic.protocols), "protocol_type": m.classic.protocol_type,
                            "rebalance_protocols": list(m.classic.rebalance_protocols)}
    return entry


def consumer_head(group: ConsumerGroup) -> dict[str, Any]:
    """The group's own figures (its ``consumer`` entry): no member read."""
    head: dict[str, Any] = {"format": FORMAT, "epoch": group.epoch, "target_epoch": group.target_epoch, "assignor": group.assignor,
                            "last_error": group.last_error}
    if group.split_from:  # children waiting for their parents' release (``split_lineage``): kept across a restart
        head["split_from"] = dict(group.split_from)
    return head


def changed_parts(group: ConsumerGroup) -> dict[str, Any]:
    """The per-member records changed since the last write (None: the member is gone), O(changes).
    A member whose target changed is written too: its record then says its epoch exactly (an epoch
    it took without a write is implied only while its target stays the same, ``implied_epoch``)."""
    parts: dict[str, Any] = {}
    members = group.members
    targets = group.target
    changed_targets = targets.drain()  # type: ignore[attr-defined]  # a TargetMap
    for member_id in group.changed:
        member = members.get(member_id)
        parts[MEMBER + member_id] = None if member is None else member_entry(member)
    for member_id in changed_targets - group.changed:
        member = members.get(member_id)
        if member is not None:
            parts[MEMBER + member_id] = member_entry(member)
    group.changed = set()
    for member_id in changed_targets:
        tasks = targets.get(member_id)
        parts[TARGET + member_id] = None if tasks is None else _pairs(tasks)
    return parts


def implied_epoch(member: ConsumerMember, target: frozenset[TaskReplica], target_epoch: int) -> int:
    """The latest epoch a loaded member may have been told: a Stable member that runs its whole target
    takes each new target epoch without a write while its target stays the same (``ConsumerGroup.hold``),
    so it may know any epoch up to the group's target epoch (it is loaded at that one, and its record's
    epoch is accepted too); any other member's record is exact."""
    now = member.reconciled
    if (member.classic is None and not member.away and now.state is MemberState.STABLE and not now.revoking
            and now.assigned == target):
        return max(target_epoch, now.epoch)
    return now.epoch


def consumer_from_record(group_id: str, record: Mapping[str, Any], parts: Mapping[str, Any] | None,
                         catalog_version: int | None, now: float = 0.0) -> ConsumerGroup:
    """The group as stored (``record``: its ``consumer`` entry; ``parts``: its per-member records);
    ``now``: when its members were last heard of (their sessions start afresh)."""
    fmt = record.get("format", 1)
    if fmt > FORMAT:
        raise ValueError(f"group {group_id!r}: consumer record format {fmt} is newer than this groupcoord reads "
                         f"({FORMAT}): upgrade groupcoord")
    if fmt == 1:  # every member and the target inside the group's record
        members, targets = record["members"], record["target"]
    else:
        parts = parts or {}
        members = [entry for key, entry in parts.items() if key.startswith(MEMBER)]
        targets = {key[len(TARGET):]: pairs for key, pairs in parts.items() if key.startswith(TARGET)}
    group = ConsumerGroup(group_id, record["assignor"], epoch=record["epoch"], target_epoch=record["target_epoch"],
                          catalog_version=catalog_version, last_error=record.get("last_error", ""),
                          entry_of=member_entry, split_from=dict(record.get("split_from", {})))
    group.target = {member_id: _tasks(pairs) for member_id, pairs in targets.items()}
    for m in members:
        _load_member(group, m, now)
    for member in group.members.values():
        implied = implied_epoch(member, group.target_of(member.member_id), group.target_epoch)
        if implied > member.epoch:  # it may know any epoch from its record's to the implied one
            member.accepts_from, member.reconciled = member.epoch, member.reconciled._replace(epoch=implied)
    if fmt == FORMAT:  # as stored: nothing to write (a format-1 group's first write writes every part)
        group.changed = set()
        group.target.drain()  # type: ignore[attr-defined]
    return group


def _load_member(group: ConsumerGroup, m: Mapping[str, Any], now: float) -> None:
    metadata = pb.MemberMetadata()
    metadata.ParseFromString(base64.b64decode(m["metadata"]))
    member = ConsumerMember(
        member_id=m["member_id"], instance_id=m["instance_id"], client_id=m["client_id"], host=m["host"],
        principal=m["principal"], metadata=metadata, session_timeout_ms=m["session_timeout_ms"],
        rebalance_timeout_ms=m["rebalance_timeout_ms"], away=m["away"], last_seen=now,
        classic=_classic(m.get("classic")),
        # written before members could name different assignors: each named the group's (or none, alike)
        assignor=m.get("assignor", "" if "classic" in m else group.assignor))
    member.reconciled = Reconciled(MemberState.STABLE, m["epoch"], frozenset())
    group.add(member)
    group.hold(member, Reconciled(MemberState(m["state"]), m["epoch"], _tasks(m["assigned"]),
                                  _tasks(m["revoking"])))
    member.previous_epoch = m["previous_epoch"]
    group.refresh(member)


def _classic(entry: Mapping[str, Any] | None) -> ClassicTraits | None:
    if entry is None:
        return None
    return ClassicTraits(tuple(entry["protocols"]), entry["protocol_type"], tuple(entry["rebalance_protocols"]))


def record_of(classic: Group, group: ConsumerGroup | None) -> dict[str, Any]:
    """A group's whole record: its classic part, and its consumer part with every per-member record
    (tools, and stores that keep no parts)."""
    record = group_to_record(classic)
    if group is not None:
        record["consumer"] = consumer_head(group)
        parts: dict[str, Any] = {MEMBER + i: member_entry(member) for i, member in group.members.items()}
        parts.update((TARGET + member_id, _pairs(tasks)) for member_id, tasks in group.target.items())
        record["parts"] = parts
    return record


def write_of(classic: Group, group: ConsumerGroup | None) -> dict[str, Any] | Persist:
    """What a change of the group writes: a classic group's whole record; a consumer group's own
    record only if it changed, and the per-member records that changed."""
    record = group_to_record(classic)
    if group is None:
        return record
    record["consumer"] = consumer_head(group)
    last, group.last_head = group.last_head, record
    head = None if last is not None and _same_head(last, record) else record
    return Persist(classic.group_id, head, changed_parts(group))


def _same_head(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two drafts of a group's own record say the same (the catalog and the load snapshot are
    compared by reference: the model replaces them, never changes them in place)."""
    if a.keys() != b.keys():
        return False
    return all(a[key] is b[key] or (key not in _BY_REFERENCE and a[key] == b[key]) for key in a)


_BY_REFERENCE = frozenset({"tasks", "load_snapshot"})
