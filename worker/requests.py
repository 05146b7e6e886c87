"""The requests a worker sends, built from its settings and what it runs (no I/O here)."""

from __future__ import annotations

from groupcoord.assignors.base import RebalanceProtocol
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import replicas_to_pb
from groupcoord.worker.config import WorkerConfig
from groupcoord.worker.ownership import Ownership

__all__ = ["join_request", "heartbeat_request", "leave_request", "load_request"]


def join_request(config: WorkerConfig, member_id: str, tasks: Ownership) -> pb.JoinGroupRequest:
    """JoinGroup: who we are, what we offer (assignors, rebalance protocols), what we run."""
    cooperative = config.rebalance_protocol == RebalanceProtocol.COOPERATIVE
    return pb.JoinGroupRequest(
        group_id=config.group_id,
        member_id=member_id,
        instance_id=config.instance_id,
        client_id=config.client_id,
        session_timeout_ms=config.session_timeout_ms,
        rebalance_timeout_ms=config.rebalance_timeout_ms,
        protocols=list(config.assignors),
        protocol_type=config.protocol_type,
        rebalance_protocols=list(RebalanceProtocol) if cooperative else [RebalanceProtocol.EAGER],
        metadata=pb.MemberMetadata(
            rack=config.rack,
            pool=config.pool,
            capacity=config.capacity,
            attributes=dict(config.attributes),
            owned=replicas_to_pb(tasks.owned),
            owned_generation=tasks.owned_generation,
        ),
    )


def heartbeat_request(config: WorkerConfig, member_id: str, generation: int) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(group_id=config.group_id, member_id=member_id, generation=generation,
                               instance_id=config.instance_id)


def leave_request(config: WorkerConfig, member_id: str) -> pb.LeaveGroupRequest:
    return pb.LeaveGroupRequest(group_id=config.group_id, member_id=member_id, instance_id=config.instance_id)


def load_request(config: WorkerConfig, member_id: str, generation: int, report: pb.LoadReport) -> pb.ReportLoadRequest:
    return pb.ReportLoadRequest(group_id=config.group_id, member_id=member_id, generation=generation, report=report)
