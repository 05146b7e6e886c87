"""Bounds on everything a client sends, checked before the model keeps any of it.

Each check returns None or INVALID_REQUEST naming the field and the limit (the config key
that sets it), so a hostile or buggy client learns what it did wrong and the coordinator
keeps nothing of the request. Ids must also be printable: they go into logs and answers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["group_metadata_limit", "pending_id_lifetime_s", "check_id", "check_text", "escaped", "quoted", "listed", "leave_batch_limit", "check_task", "check_tasks",
           "check_snapshot", "check_report"]

QUOTE = 64  # characters of client input an error message quotes, at most

_UUID_SUFFIX = 37  # "-" and a uuid4, appended to a client or instance id to make a member id


def _bad(field: str, problem: str) -> pb.Error:
    return error(pb.INVALID_REQUEST, f"{field} {problem}")


def check_id(config: CoordinatorConfig, field: str, value: str, *, member_id: bool = False) -> pb.Error | None:
    """An id (may be empty): printable and at most ``max_id_length`` characters."""
    if not value:
        return None
    limit = config.max_id_length + (_UUID_SUFFIX if member_id else 0)
    if len(value) > limit:
        return _bad(field, f"is {len(value)} characters; at most {limit} (max_id_length)")
    if not value.isprintable():
        return _bad(field, "must be printable (no control characters)")
    return None


def group_metadata_limit(config: CoordinatorConfig) -> int:
    """Most bytes a group's members' entries may take in the leader's JoinGroup answer: the setting,
    and never more than half a message (the catalog and the load snapshot travel beside them)."""
    return min(config.group_max_metadata_bytes, config.max_message_bytes // 2)


def pending_id_lifetime_s(config: CoordinatorConfig, session_timeout_ms: int) -> float:
    """How long a member id handed out with MEMBER_ID_REQUIRED waits for its second join: the session
    the join asked for (Kafka's pending-member expiration), never longer than the coordinator's bound."""
    return min(session_timeout_ms, config.group_pending_member_timeout_ms) / 1000


def quoted(value: str, limit: int = QUOTE) -> str:
    """``value`` for an error message or a log line: its repr, escaped, and cut to ``limit`` characters
    with the full length said (a 60 MB name must not come back as a 60 MB message)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def listed(values: list[str], most: int = 10) -> str:
    """The first ``most`` of ``values``, each ``quoted``, and how many more."""
    shown = ", ".join(quoted(v) for v in values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def leave_batch_limit(config: CoordinatorConfig) -> int:
    """Most members one LeaveGroup may name: every member and pending id once, and never more than
    an answer of ``max_message_bytes`` can carry (each entry answers with its ids and an error)."""
    per_entry = 4 * (config.max_id_length + _UUID_SUFFIX) + 2 * QUOTE + 256
    return min(config.group_max_size + config.group_max_pending_members, config.max_message_bytes // per_entry)


def check_text(config: CoordinatorConfig, field: str, value: str, *, printable: bool = False) -> pb.Error | None:
    """Free text (a reason, an error): at most ``max_reason_length`` characters; ``printable`` for
    text that is logged and shown as is (no newlines or terminal escapes)."""
    if len(value) > config.max_reason_length:
        return _bad(field, f"is {len(value)} characters; at most {config.max_reason_length} (max_reason_length)")
    if printable and not value.isprintable():
        return _bad(field, "must be printable (no control characters)")
    return None


def escaped(text: str) -> str:
    """``text`` safe for a log line or a terminal: control characters written as escapes."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def check_task(config: CoordinatorConfig, task: pb.Task, where: str = "task") -> pb.Error | None:
    """One catalog entry, from PutTasks or a leader's split: the same rules either way. Fields are
    read once each (protobuf field access is not free: a catalog has up to 100,000 of these)."""
    task_id, pool, replicas, weight = task.task_id, task.pool, task.replicas, task.weight
    if not task_id or len(task_id) > config.max_id_length or not task_id.isprintable():
        return _bad(f"{where} id {task_id[:64]!r}", f"must be non-empty, printable, at most {config.max_id_length} "
                    f"characters (max_id_length)")
    if pool and (len(pool) > config.max_id_length or not pool.isprintable()):
        return _bad(f"{where} {task_id!r} pool", f"must be printable, at most {config.max_id_length} characters "
                    f"(max_id_length)")
    if not 0 <= replicas <= config.max_replicas:
        return _bad(f"{where} {task_id!r}", f"replicas must be in [1, {config.max_replicas}] (max_replicas)")
    if not (weight >= 0 and math.isfinite(weight)):
        return _bad(f"{where} {task_id!r}", "weight must be a finite number >= 0")
    attributes = task.attributes
    if attributes:
        if len(attributes) > config.max_task_attributes:
            return _bad(f"{where} {task_id!r}", f"has {len(attributes)} attributes; at most "
                        f"{config.max_task_attributes} (max_task_attributes)")
        for key, value in attributes.items():
            failure = check_text(config, f"{where} {task_id!r} attribute key", key) or check_text(
                config, f"{where} {task_id!r} attribute {key[:64]!r}", value)
            if failure is not None:
                return failure
    return None


def check_tasks(config: CoordinatorConfig, tasks: Iterable[pb.Task], where: str = "task") -> pb.Error | None:
    for task in tasks:
        failure = check_task(config, task, where)
        if failure is not None:
            return failure
    return None


def check_snapshot(config: CoordinatorConfig, snapshot: pb.LoadSnapshot, now_ms: int) -> pb.Error | None:
    size = snapshot.ByteSize()
    if size > config.max_snapshot_bytes:
        return _bad("load snapshot", f"is {size} bytes; at most {config.max_snapshot_bytes} (max_snapshot_bytes)")
    if snapshot.created_ms > now_ms + config.max_snapshot_skew_ms:
        return _bad("load snapshot created_ms", f"{snapshot.created_ms} is in the future (now {now_ms}; "
                    f"max_snapshot_skew_ms {config.max_snapshot_skew_ms})")
    return check_id(config, "load snapshot id", snapshot.snapshot_id)


def check_report(config: CoordinatorConfig, report: pb.LoadReport) -> pb.Error | None:
    if len(report.tasks) > config.max_tasks_per_report:
        return _bad("load report", f"has {len(report.tasks)} task entries; at most {config.max_tasks_per_report} "
                    f"(max_tasks_per_report)")
    for task in report.tasks:
        failure = check_id(config, "load report task id", task.task_id)
        if failure is not None:
            return failure
    return None
