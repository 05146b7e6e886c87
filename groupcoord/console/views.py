"""What each page shows, as plain dicts: the admin API's answers in, template rows out.

Pure (no I/O, no clock of its own), so every figure the pages show is tested without a server.
Strings from clients (group, member, instance and task ids, hosts, racks, reasons) are passed on
as they are: the templates escape them for HTML and ``visible`` writes their control characters
(ESC, OSC, newlines) as escapes, once, for every value a page prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from groupcoord.admin import ClusterView
from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.metrics import balance
from groupcoord.console.history import Observation, Rebalance
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = [
    "Page", "cluster_view", "group_row", "group_view", "imbalance", "member_view", "observation", "page_of",
    "state_name", "visible",
]

_STATE_NAMES: dict[int, str] = {
    pb.EMPTY: "Empty", pb.PREPARING_REBALANCE: "PreparingRebalance", pb.AWAITING_SYNC: "AwaitingSync",
    pb.STABLE: "Stable", pb.DEAD: "Dead", pb.ASSIGNING: "Assigning", pb.RECONCILING: "Reconciling",
}
_SHARD_STATES: dict[int, str] = {
    pb.SHARD_ACTIVE: "active", pb.SHARD_LOADING: "loading", pb.SHARD_UNLOADING: "unloading",
    pb.SHARD_LEADERLESS: "leaderless",
}


def visible(value: Any) -> Any:
    """A string with its control characters written as escapes (``\\x1b``), anything else unchanged:
    a name carrying ANSI or OSC bytes shows what it carries instead of acting on a terminal or page."""
    if isinstance(value, str) and not value.isprintable():
        return value.encode("unicode_escape").decode("ascii")
    return value


def state_name(state: int) -> str:
    """As ``groups list`` and docs/reference/states.md spell it."""
    return _STATE_NAMES.get(state, "Unknown")


@dataclass(frozen=True)
class Page:
    """One page of a long list: its items and where it sits."""

    items: list[Any]
    number: int
    pages: int
    total: int
    first: int  # 1-based position of the first item (0 when empty)


def page_of(items: Sequence[Any], number: int, size: int) -> Page:
    """Page ``number`` (1-based, clamped into range) of ``items``, ``size`` per page."""
    pages = max(1, math.ceil(len(items) / size))
    number = min(max(1, number), pages)
    start = (number - 1) * size
    return Page(list(items[start:start + size]), number, pages, len(items), start + 1 if items else 0)


def _replica(r: pb.TaskReplica) -> str:
    return r.task_id if r.replica == 0 else f"{r.task_id}#{r.replica}"


def _assignment(response: pb.DescribeGroupResponse) -> dict[str, list[TaskReplica]]:
    return {d.member.member_id: [TaskReplica(t.task_id, t.replica) for t in d.assigned] for d in response.members}


def observation(response: pb.DescribeGroupResponse) -> Observation:
    """What the rebalance history compares between two looks at the group."""
    return Observation(
        generation=response.generation, assignment=_assignment(response),
        client_ids={d.member.member_id: d.member.client_id for d in response.members},
        tasks=frozenset(t.task_id for t in response.tasks), last_error=response.last_error)


def _cpu_share(worker: pb.WorkerLoadStats) -> float:
    """CPU used as a share of the worker's limit (a limit <= 0 is unknown: the usage read as percent)."""
    share = worker.cpu_usage / worker.cpu_limit if worker.cpu_limit > 0 else worker.cpu_usage / 100
    return max(0.0, share)


def imbalance(response: pb.DescribeGroupResponse) -> dict[str, Any]:
    """Busiest member over the mean: by CPU when a load snapshot covers the members, else by task weight."""
    members = [d.member.member_id for d in response.members]
    workers = {w.worker_id: w for w in response.load_snapshot.workers}
    loads = [_cpu_share(workers[m]) for m in members if m in workers]
    if members and len(loads) == len(members):
        mean = sum(loads) / len(loads)
        return {"by": "cpu", "max_over_mean": round(max(loads) / mean, 2) if mean else 1.0}
    weights = {t.task_id: (t.weight or 1.0) for t in response.tasks}
    figures = balance(_assignment(response), weights)
    return {"by": "task weight", "max_over_mean": round(figures.weight_max_over_mean, 2)}


def _rebalance(entry: Rebalance) -> dict[str, Any]:
    return {"from_generation": entry.from_generation, "generation": entry.generation, "seen_at": entry.seen_at,
            "reasons": list(entry.reasons), "moved": entry.moved, "moved_sample": list(entry.moved_sample)}


def group_row(listing: pb.GroupListing, described: pb.DescribeGroupResponse | None,
              last: Rebalance | None) -> dict[str, Any]:
    """One line of the groups page; ``described`` (None: not fetched) adds tasks and imbalance."""
    row: dict[str, Any] = {
        "group_id": listing.group_id, "state": state_name(listing.state), "protocol": listing.protocol,
        "generation": listing.generation, "members": listing.num_members, "tasks": None, "imbalance": None,
        "last_rebalance": _rebalance(last) if last is not None else None,
    }
    if described is not None:
        row["tasks"] = len(described.tasks)
        row["imbalance"] = imbalance(described)
        row["last_error"] = described.last_error
    return row


def _member_row(d: pb.DescribedMember, leader_id: str, workers: Mapping[str, pb.WorkerLoadStats],
                top_cpu: float) -> dict[str, Any]:
    member = d.member
    worker = workers.get(member.member_id)
    load = None
    if worker is not None:
        share = _cpu_share(worker)
        load = {"cpu_usage": worker.cpu_usage, "cpu_limit": worker.cpu_limit, "cpu_share": share,
                "bar": share / top_cpu if top_cpu > 0 else 0.0,
                "msg_rate": worker.long_msg_rate_in + worker.long_msg_rate_out,
                "memory_usage": worker.memory_usage, "memory_limit": worker.memory_limit}
    return {
        "member_id": member.member_id, "client_id": member.client_id, "instance_id": member.instance_id,
        "host": member.host, "rack": member.metadata.rack, "pool": member.metadata.pool,
        "leader": member.member_id == leader_id, "tasks": [_replica(t) for t in d.assigned],
        "last_seen_ms_ago": d.last_seen_ms_ago, "load": load, "consumer": _reconciliation(d),
    }


def _reconciliation(d: pb.DescribedMember) -> dict[str, Any] | None:
    """A consumer-protocol member's epoch and state, its target's size, what it gives up and waits for."""
    if not d.HasField("consumer"):
        return None
    c = d.consumer
    return {"epoch": c.member_epoch, "state": "away" if c.away else c.state, "target": len(c.target),
            "revoking": [_replica(t) for t in c.revoking], "waiting": [_replica(t) for t in c.waiting],
            "after": {_replica(w.child): _replica(w.parent) for w in c.split_waits}}


def _split_waits(response: pb.DescribeGroupResponse) -> list[dict[str, str]]:
    """Each split child given to a member that cannot start it yet: a member still runs its parent (or an
    older ancestor), which the coordinator waits for it to let go (``groups describe``'s waiting_for_parent)."""
    return [{"child": _replica(w.child), "parent": _replica(w.parent), "member_id": d.member.member_id,
             "held_by": w.held_by}
            for d in response.members if d.HasField("consumer") for w in d.consumer.split_waits]


def group_view(response: pb.DescribeGroupResponse, history: Sequence[Rebalance],
               plan: Mapping[str, Any] | None, now_ms: float) -> dict[str, Any]:
    """The group page: header, members with their load bars, rebalances seen, and the plan if any."""
    snapshot = response.load_snapshot
    workers = {w.worker_id: w for w in snapshot.workers}
    # bars are relative to the busiest member's share, floored at full capacity so idle members look idle
    top = max([1.0] + [_cpu_share(w) for w in workers.values()])
    members = [_member_row(d, response.leader_id, workers, top) for d in response.members]
    members.sort(key=lambda m: (m["client_id"], m["member_id"]))
    return {
        "group_id": response.group_id, "state": state_name(response.state), "generation": response.generation,
        "protocol": response.protocol, "leader_id": response.leader_id, "members": members,
        "type": response.group_type or "classic", "group_epoch": response.group_epoch,
        "target_epoch": response.target_epoch,
        "tasks": len(response.tasks), "unassigned": [(_replica(u.task), u.reason) for u in response.unassigned],
        "last_error": response.last_error, "imbalance": imbalance(response),
        "snapshot": {"snapshot_id": snapshot.snapshot_id,
                     "age_s": round(max(0.0, now_ms - snapshot.created_ms) / 1000, 1)} if snapshot.snapshot_id else None,
        "history": [_rebalance(e) for e in history], "plan": plan, "split_waits": _split_waits(response),
        "names": {m["member_id"]: m["client_id"] for m in members},
    }


def member_view(response: pb.DescribeGroupResponse, member_id: str) -> dict[str, Any] | None:
    """One member of the group (None: not a member now), with its metadata and each task's figures."""
    for d in response.members:
        if d.member.member_id == member_id:
            break
    else:
        return None
    workers = {w.worker_id: w for w in response.load_snapshot.workers}
    row = _member_row(d, response.leader_id, workers, 1.0)
    stats = {t.task_id: t for t in response.load_snapshot.tasks}  # a task's rate, whoever ran it then
    row["task_rows"] = [
        {"task": _replica(t), "msg_rate": (stats[t.task_id].long_msg_rate_in + stats[t.task_id].long_msg_rate_out)
         if t.task_id in stats else None} for t in d.assigned]
    row["attributes"] = sorted(d.member.metadata.attributes.items())
    row["capacity"] = d.member.metadata.capacity or 1.0
    row["group_id"] = response.group_id
    row["generation"] = response.generation
    row["state"] = state_name(response.state)
    return row


def cluster_view(view: ClusterView) -> dict[str, Any]:
    """Coordinators, shards (leader, epoch, state, groups, members) and moves; one coordinator is a
    cluster of one shard."""
    return {
        "mode": view.mode, "shards": view.shards, "asked": view.asked,
        "coordinators": [{"address": c.address, "shards_led": c.shards_led} for c in view.coordinators],
        "shard_infos": [{"shard": s.shard, "leader": s.leader, "epoch": s.epoch,
                         "state": _SHARD_STATES.get(s.state, "unknown"),
                         "groups": s.groups if s.groups >= 0 else None,
                         "members": s.members if s.members >= 0 else None} for s in view.shard_infos],
        "moves": [{"shard": m.shard, "from": m.from_address, "to": m.to_address} for m in view.moves],
        "failed": sorted(view.failed.items()),
    }
