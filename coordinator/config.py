"""Coordinator settings: keyword-only, frozen, each with its default and unit.

Names and defaults follow Kafka's broker settings for the classic group
protocol (``group.min.session.timeout.ms`` and friends), snake_cased.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["CoordinatorConfig", "ConfigError"]


class ConfigError(ValueError):
    """A setting is unknown or out of range (the message names it)."""


@dataclass(frozen=True, kw_only=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = 6_000
    """Smallest session timeout a member may ask for (ms)."""
    group_max_session_timeout_ms: int = 1_800_000
    """Largest session timeout a member may ask for (ms)."""
    group_initial_rebalance_delay_ms: int = 3_000
    """A new group waits this long (extended per new member, up to the rebalance timeout) so a
    fleet starting together forms one generation, not one per member (ms)."""
    group_max_size: int = 100_000
    """Most members a group may have (pending member ids of the two-step join do not count)."""
    group_departed_member_grace_ms: int = 0
    """A static member whose session expired keeps its place and its tasks this much longer before
    it is removed and its tasks move (Kafka Connect's scheduled.rebalance.max.delay.ms, per member);
    back in time, it gets them again with no move. 0: removed when its session expires (ms)."""
    group_new_member_join_timeout_ms: int = 300_000
    """A new member's parked JoinGroup expires after this long if the join phase has not ended
    (KIP-394: it has no member id yet, so it cannot heartbeat) (ms)."""
    group_empty_retention_ms: int = 600_000
    """A group with no members, no pending ids and no tasks is deleted after being so this long
    (Kafka deletes empty groups once their offsets expire); a catalog keeps a group (ms)."""
    consumer_heartbeat_interval_ms: int = 5_000
    """Consumer protocol (GroupHeartbeat): how often members heartbeat; every answer says so (Kafka's
    group.consumer.heartbeat.interval.ms) (ms)."""
    consumer_session_timeout_ms: int = 45_000
    """Consumer protocol: a member's session when its join does not ask for one; not bound by the classic
    protocol's min/max session timeouts (Kafka's group.consumer.session.timeout.ms) (ms)."""
    consumer_assignment_interval_ms: int = 100
    """Consumer protocol: a group's target is computed at most once per this interval; changes
    meanwhile are batched into the next computation (ms)."""
    max_metadata_bytes: int = 1_048_576
    """Largest serialised MemberMetadata a JoinGroup may carry (bytes)."""
    group_max_metadata_bytes: int = 32 * 1_048_576
    """Most bytes all of a group's members' metadata (and ids) may take together: they all go into
    the leader's JoinGroup answer, which must fit in ``max_message_bytes`` beside the catalog and the
    load snapshot. The bound used is this or half of ``max_message_bytes``, whichever is smaller; a
    join that would pass it gets GROUP_MAX_SIZE_REACHED, and the group goes on as it was (bytes)."""
    max_id_length: int = 255
    """Longest group, member, instance, client and task id, pool and assignor name (characters)."""
    max_reason_length: int = 1_024
    """Longest free text a client sends: an unassigned replica's reason, an assignor's error."""
    group_max_tasks: int = 100_000
    """Most tasks a group's catalog may hold."""
    max_tasks_per_request: int = 100_000
    """Most tasks one PutTasks may carry."""
    max_task_attributes: int = 64
    """Most attributes a task may carry; each key and value at most ``max_reason_length`` characters."""
    max_replicas: int = 1_000
    """Largest replication factor a task may have."""
    max_splits_per_sync: int = 1_000
    """Most task splits one leader's SyncGroup may carry."""
    group_max_pending_members: int = 1_000
    """Most member ids of the two-step join a group may hold, handed out and not yet seen back; past
    it, the oldest makes room for a new one (each lives at most ``group_pending_member_timeout_ms``)."""
    group_pending_member_timeout_ms: int = 30_000
    """Longest a member id handed out with MEMBER_ID_REQUIRED waits for the join that uses it: the
    session timeout the join asked for, but never longer than this, however long a session it asks
    for (a flood asking for 30-minute sessions kept its ids 30 minutes) (ms)."""
    max_groups_per_principal: int = 10_000
    """Most groups one authenticated principal may create (by its first JoinGroup or PutTasks of a new
    group id); deleting a group gives its place back. Without authentication there is no quota."""
    max_tasks_per_principal: int = 2_000_000
    """Most catalog tasks, over every group one authenticated principal created, that PutTasks may
    bring (the catalog of a group counts against its creator, whoever edits it)."""
    group_max_pending_members_per_principal: int = 200
    """Most of those one principal (or, with security off, one client address) may hold: past it, the
    asker's own oldest id makes room for the new one, so a flood of first joins pushes out only its
    own ids and cannot keep another's members out, nor a real client behind the flooder's address.
    Only its asker may join with an id; it lives at most ``group_pending_member_timeout_ms``."""
    max_tasks_per_report: int = 10_000
    """Most per-task entries one ReportLoad may carry."""
    max_snapshot_bytes: int = 16 * 1_048_576
    """Largest load snapshot a group keeps (bytes, serialised)."""
    max_snapshot_skew_ms: int = 60_000
    """A load snapshot may be at most this far in the future of the coordinator's clock (ms)."""
    max_message_bytes: int = 64 * 1_048_576
    """gRPC receive limit (bytes); larger requests get RESOURCE_EXHAUSTED."""
    max_request_bytes_in_flight: int = 256 * 1_048_576
    """Large requests (256 KiB and up) the coordinator holds at once, in bytes; past it a large
    request is refused at once with RESOURCE_EXHAUSTED (retriable) so memory stays bounded however
    many clients send maximal requests together. At least ``max_message_bytes``."""
    max_pending_requests: int = 10_000
    """Calls gRPC may hold for the coordinator before it starts refusing new ones (twice this is
    the hard limit). gRPC's own default (1,000) drops calls at random under overload, so live
    members lose heartbeats and sessions; held, a heartbeat is answered late instead. Memory is
    bounded: a call's message is read only once the coordinator takes it."""
    http2_bdp_probe: str = "auto"
    """Whether gRPC may grow each call's HTTP/2 flow-control window past 64 KiB (BDP probing): "on",
    "off", or "auto" (off when token authentication is on). Off, a call refused as it arrives (no
    valid token) can push at most one window into the coordinator's memory: four senders of
    24 MiB bodies took it from 56 MiB to a 495 MiB peak with probing on, to 57 MiB with it off.
    A large request from far away (a long round trip) takes longer with it off."""

    failed_request_delay_ms: int = 100
    """A call refused before its body is read or decoded (no valid credential, no right on the group)
    is answered after this pause, as Kafka's connection.failed.authentication.delay.ms: a client that
    retries on each answer is refused at most ten times a second per call it keeps open, and the
    pause reads nothing and costs no CPU; at most 256 refusals wait at once. 0: at once (ms)."""

    session_max_message_bytes: int = 16 * 1_048_576
    """Session stream: largest message a stream may carry (bytes); each body is also held to its unary
    twin's bound. A larger one is answered INVALID_REQUEST under its tag, unread past its first bytes."""
    session_max_members: int = 10_000
    """Session stream: most members one stream may carry at once (every group together); a request for
    one more is answered INVALID_REQUEST and the stream goes on."""
    session_max_in_flight: int = 20_000
    """Session stream: most requests of one stream waiting for their answers (a parked JoinGroup counts);
    one more is answered INVALID_REQUEST at once and the stream goes on."""
    session_max_buffered_bytes: int = 32 * 1_048_576
    """Session stream: most bytes of answers and news waiting for a slow reader, besides the message being
    written; past it the stream is cut off with RESOURCE_EXHAUSTED, so a client that stops reading cannot
    grow the coordinator's memory (bytes)."""
    session_idle_timeout_ms: int = 600_000
    """Session stream: a stream with no request waiting and none received for this long is closed
    with UNAVAILABLE (Kafka's connections.max.idle.ms) (ms)."""
    session_max_streams_per_principal: int = 1_000
    """Session stream: most streams one authenticated principal may hold open on one coordinator; one
    more is refused at open with RESOURCE_EXHAUSTED. Without authentication there is no quota."""

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms <= 0:
            raise ConfigError("group_min_session_timeout_ms must be > 0")
        if self.group_max_session_timeout_ms < self.group_min_session_timeout_ms:
            raise ConfigError("group_max_session_timeout_ms must be >= group_min_session_timeout_ms")
        if self.group_departed_member_grace_ms < 0:
            raise ConfigError("group_departed_member_grace_ms must be >= 0")
        if self.group_initial_rebalance_delay_ms < 0:
            raise ConfigError("group_initial_rebalance_delay_ms must be >= 0")
        # not tied to the classic protocol's group_min/max_session_timeout_ms: an operator who narrowed those
        # for classic members must not find the coordinator refusing to start over a protocol it does not use
        # (Kafka's consumer protocol has its own bounds too)
        if self.consumer_session_timeout_ms <= 0:
            raise ConfigError("consumer_session_timeout_ms must be > 0")
        if not 0 < self.consumer_heartbeat_interval_ms < self.consumer_session_timeout_ms:
            raise ConfigError("consumer_heartbeat_interval_ms must be > 0 and < consumer_session_timeout_ms")
        if self.consumer_assignment_interval_ms < 0:
            raise ConfigError("consumer_assignment_interval_ms must be >= 0")
        if self.max_request_bytes_in_flight < self.max_message_bytes:
            raise ConfigError("max_request_bytes_in_flight must be >= max_message_bytes")
        if not 0 <= self.failed_request_delay_ms <= 10_000:
            raise ConfigError("failed_request_delay_ms must be from 0 to 10000")
        if self.http2_bdp_probe not in ("auto", "on", "off"):
            raise ConfigError(f"http2_bdp_probe must be 'auto', 'on' or 'off', not {self.http2_bdp_probe[:20]!r}")
        for name in ("group_max_size", "group_new_member_join_timeout_ms", "group_empty_retention_ms",
                     "max_metadata_bytes", "group_max_metadata_bytes", "max_id_length", "max_reason_length", "group_max_tasks",
                     "max_tasks_per_request", "max_task_attributes", "max_replicas", "max_splits_per_sync",
                     "group_max_pending_members", "group_max_pending_members_per_principal", "group_pending_member_timeout_ms",
                     "max_groups_per_principal", "max_tasks_per_principal", "max_tasks_per_report", "max_snapshot_bytes", "max_snapshot_skew_ms",
                     "max_message_bytes", "max_pending_requests"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        for name in ("session_max_message_bytes", "session_max_members", "session_max_in_flight",
                     "session_max_buffered_bytes", "session_idle_timeout_ms", "session_max_streams_per_principal"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> CoordinatorConfig:
        """Build from a config file section; unknown keys are an error, not silently dropped."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown coordinator setting(s): {', '.join(unknown)}")
        converted: dict[str, Any] = {}
        for key, value in values.items():
            try:
                converted[key] = int(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{key} must be an integer, got {value!r}") from None
        return cls(**converted)
