"""Bounds of a GroupHeartbeat, checked before it touches any group (as ``limits`` does for the
classic requests): ids, metadata size, the owned list, timeouts. Each check returns None or the
error that answers the request, naming the field and the config key."""

from __future__ import annotations

from collections.abc import Sequence

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model import limits, quotas
from groupcoord.coordinator.model.consumer_assignor import unsupported
from groupcoord.coordinator.model.consumer_group import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup
from groupcoord.coordinator.model.context import Model
from groupcoord.coordinator.model.effects import error
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["admission_error", "request_error", "owned_of", "timeout_error"]


def request_error(config: CoordinatorConfig, request: pb.GroupHeartbeatRequest) -> pb.Error | None:
    """INVALID_REQUEST (or INVALID_SESSION_TIMEOUT) for a request no group should see: Kafka's
    throwIfConsumerGroupHeartbeatRequestIsInvalid's rules, where ours has the field (docs/protocol2.md)."""
    if not request.group_id.strip():
        return error(pb.INVALID_REQUEST, "group_id: empty (or only spaces); every request names its group")
    if request.HasField("instance_id") and not request.instance_id.strip():
        return error(pb.INVALID_REQUEST, "instance_id: empty; a static member names itself, a dynamic one "
                     "leaves the field out")
    if request.member_epoch < STATIC_LEAVE_EPOCH:
        return error(pb.INVALID_REQUEST, f"member_epoch: {request.member_epoch}; at least {STATIC_LEAVE_EPOCH} "
                     f"(-2 static leave, -1 leave, 0 join)")
    failure = (limits.check_id(config, "member_id", request.member_id, member_id=True)
               or limits.check_id(config, "instance_id", request.instance_id)
               or limits.check_id(config, "client_id", request.client_id)
               or limits.check_id(config, "assignor", request.assignor))
    if failure is not None:
        return failure
    if request.member_epoch != 0 and not request.member_id:
        return error(pb.INVALID_REQUEST, "member_id: empty; only a join (member_epoch 0) may omit it")
    if request.member_epoch == STATIC_LEAVE_EPOCH and not request.instance_id:
        return error(pb.INVALID_REQUEST, "member_epoch -2 (a static member leaving for a while) needs instance_id")
    if request.HasField("metadata") and request.metadata.ByteSize() > config.max_metadata_bytes:
        return error(pb.INVALID_REQUEST, f"metadata: {request.metadata.ByteSize()} bytes; at most "
                     f"{config.max_metadata_bytes} (max_metadata_bytes)")
    if request.HasField("owned"):
        failure = _owned_error(config, request.owned.tasks)
        if failure is not None:
            return failure
        if request.member_epoch == 0 and request.owned.tasks:
            return error(pb.INVALID_REQUEST, "owned: a join (member_epoch 0) owns nothing; stop every task first")
    if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        return None
    return timeout_error(config, request)


def timeout_error(config: CoordinatorConfig, request: pb.GroupHeartbeatRequest) -> pb.Error | None:
    low, high = config.group_min_session_timeout_ms, config.group_max_session_timeout_ms
    if request.HasField("session_timeout_ms") and not low <= request.session_timeout_ms <= high:
        return error(pb.INVALID_SESSION_TIMEOUT, f"session_timeout_ms: {request.session_timeout_ms}; between {low} "
                     f"and {high} (group_min_session_timeout_ms, group_max_session_timeout_ms)")
    if request.HasField("rebalance_timeout_ms") and not 0 < request.rebalance_timeout_ms <= high:
        return error(pb.INVALID_REQUEST, f"rebalance_timeout_ms: {request.rebalance_timeout_ms}; between 1 and "
                     f"{high} (group_max_session_timeout_ms)")
    return None


def _owned_error(config: CoordinatorConfig, owned: Sequence[pb.TaskReplica]) -> pb.Error | None:
    most = config.max_tasks_per_request
    if len(owned) > most:
        return error(pb.INVALID_REQUEST, f"owned: {len(owned)} tasks; at most {most} (max_tasks_per_request)")
    for task in owned:
        if not task.task_id or not 0 <= task.replica < config.max_replicas:
            return error(pb.INVALID_REQUEST, f"owned: task {limits.quoted(task.task_id)} replica {task.replica}: "
                         f"a task id and a replica in [0, {config.max_replicas}) (max_replicas)")
        failure = limits.check_id(config, "owned task_id", task.task_id)
        if failure is not None:
            return failure
    return None


def owned_of(request: pb.GroupHeartbeatRequest,
             sent: tuple[bytes, frozenset[TaskReplica]] | None = None) -> frozenset[TaskReplica] | None:
    """What the heartbeat says the member runs; None when it did not say (unchanged). ``sent``: the
    member's last assignment as wire bytes and set (``ConsumerMember.sent_wire``): a list that is those
    bytes (a giver saying it runs what it was last sent, as the worker sends it, sorted) is that set,
    with no set built (100 tasks: about 100 us of building, against a few to compare)."""
    if not request.HasField("owned"):
        return None
    if sent is not None and request.owned.ByteSize() == len(sent[0]) and request.owned.SerializeToString() == sent[0]:
        return sent[1]
    return frozenset(TaskReplica(t.task_id, t.replica) for t in request.owned.tasks)


def admission_error(model: Model, known: set[str], group: ConsumerGroup | None, request: pb.GroupHeartbeatRequest,
                    assignor: str, principal: str) -> pb.Error | None:
    """Why a new member may not join (None: it may): an assignor unknown here, a full group, or the
    principal's group quota. Members may name different assignors (``consumer_assignor``: the most named runs)."""
    failure = unsupported(known, assignor)
    if failure is None and group is not None and len(group.members) >= model.config.group_max_size:
        failure = error(pb.GROUP_MAX_SIZE_REACHED, f"group {request.group_id!r} has {len(group.members)} members "
                        f"(group_max_size)")
    if failure is None and group is None and request.group_id not in model.groups:
        failure = quotas.group_creation(model, principal)
    return failure
